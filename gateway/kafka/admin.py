"""Kafka administration: topics, partition end offsets, consumer-group offsets.

Every call is off the event loop: admin futures are wrapped, blocking metadata calls run in a
thread. Kafka errors become core errors here, in one place.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Mapping
from typing import TypeVar

import confluent_kafka
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import AlterConfigOpType as AlterConfigOpType  # type: ignore[attr-defined]
from confluent_kafka.admin import ConfigEntry as ConfigEntry  # type: ignore[attr-defined]
from confluent_kafka.admin import ConfigResource as ConfigResource  # type: ignore[attr-defined]
from confluent_kafka.admin import NewTopic as NewTopic  # type: ignore[attr-defined]
from confluent_kafka.admin import OffsetSpec as OffsetSpec  # type: ignore[attr-defined]
from confluent_kafka.admin import ResourceType as ResourceType  # type: ignore[attr-defined]

from gateway.errors import AlreadyExists, FailedPrecondition, NotFound, Unavailable

log = logging.getLogger(__name__)
T = TypeVar("T")
TIMEOUT = 15.0


def _error(exc: BaseException, what: str) -> Exception:
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if isinstance(err, KafkaError):
        code = err.code()
        if code == KafkaError.TOPIC_ALREADY_EXISTS:
            return AlreadyExists(f"{what}: the Kafka topic exists already")
        if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
            return NotFound(f"{what}: no such Kafka topic")
        if code in (KafkaError.TOPIC_EXCEPTION, KafkaError.INVALID_CONFIG,
                    KafkaError.INVALID_PARTITIONS, KafkaError.INVALID_REPLICATION_FACTOR,
                    KafkaError.POLICY_VIOLATION):
            return FailedPrecondition(f"{what}: Kafka refused: {err.str()}")
        return Unavailable(f"{what}: {err.str()}")
    return Unavailable(f"{what}: {exc}")


async def _await(fut: concurrent.futures.Future[T], what: str) -> T:
    try:
        return await asyncio.wait_for(asyncio.wrap_future(fut), TIMEOUT)
    except TimeoutError as exc:
        raise Unavailable(f"{what}: Kafka did not answer within {TIMEOUT:.0f} s") from exc
    except KafkaException as exc:
        raise _error(exc, what) from exc


class Admin:
    def __init__(self, config: Mapping[str, str | int | bool], replication_factor: int = -1) -> None:
        self._client = AdminClient(dict(config), logger=log)
        self._replication = replication_factor

    async def create_topic(
        self, name: str, partitions: int, config: Mapping[str, str] | None = None
    ) -> None:
        new = NewTopic(name, partitions, self._replication, config=dict(config or {}))
        futures = self._client.create_topics([new], operation_timeout=TIMEOUT)
        await _await(futures[name], f"creating Kafka topic {name}")

    async def create_topic_retrying(
        self, name: str, partitions: int, config: Mapping[str, str] | None = None,
        wait: float = 30.0,
    ) -> None:
        """Create a topic, waiting out a deletion of the same name still in progress."""
        loop = asyncio.get_running_loop()
        end = loop.time() + wait
        while True:
            try:
                return await self.create_topic(name, partitions, config)
            except AlreadyExists:
                if loop.time() > end or await self.partitions(name) is not None:
                    raise
                await asyncio.sleep(0.25)  # marked for deletion: Kafka finishes shortly

    async def set_topic_config(self, name: str, config: Mapping[str, str | None]) -> None:
        """Set (or, with None, reset to the default) configs of a topic."""
        entries = [
            ConfigEntry(k, v, incremental_operation=(
                AlterConfigOpType.DELETE if v is None else AlterConfigOpType.SET))
            for k, v in config.items()
        ]
        resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
        futures = self._client.incremental_alter_configs([resource])
        for fut in futures.values():
            await _await(fut, f"configuring Kafka topic {name}")

    async def delete_topic(self, name: str) -> None:
        futures = self._client.delete_topics([name], operation_timeout=TIMEOUT)
        try:
            await _await(futures[name], f"deleting Kafka topic {name}")
        except NotFound:
            pass

    async def partitions(self, name: str) -> int | None:
        """The topic's partition count, or None when it does not exist."""
        def fetch() -> int | None:
            md = self._client.list_topics(topic=name, timeout=TIMEOUT)
            topic = md.topics.get(name)
            if topic is None or topic.error is not None:
                return None
            return len(topic.partitions)

        try:
            return await asyncio.to_thread(fetch)
        except KafkaException as exc:
            raise _error(exc, f"describing Kafka topic {name}") from exc

    async def end_offsets(self, name: str, partitions: int) -> dict[int, int]:
        return await self._list_offsets(name, partitions, OffsetSpec.latest())  # type: ignore[no-untyped-call]

    async def offsets_for_time(self, name: str, partitions: int, ms: int) -> dict[int, int]:
        """Per partition, the first offset whose timestamp is >= ms (or the end)."""
        found = await self._list_offsets(name, partitions, OffsetSpec.for_timestamp(ms))  # type: ignore[no-untyped-call]
        ends = await self.end_offsets(name, partitions)
        return {p: (o if o >= 0 else ends[p]) for p, o in found.items()}

    async def _list_offsets(self, name: str, partitions: int, spec: OffsetSpec) -> dict[int, int]:
        """Offsets per partition; a topic created a moment ago may still be electing leaders."""
        request = {TopicPartition(name, p): spec for p in range(partitions)}
        deadline = asyncio.get_running_loop().time() + TIMEOUT
        while True:
            try:
                futures = self._client.list_offsets(request, request_timeout=TIMEOUT)
                out: dict[int, int] = {}
                for tp, fut in futures.items():
                    info = await _await(fut, f"reading offsets of {name}")
                    out[tp.partition] = info.offset
                return out
            except Unavailable:
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.2)

    async def commit_group_offsets(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        tps = [TopicPartition(topic, p, o) for p, o in offsets.items()]
        futures = self._client.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])
        await _await(futures[group], f"setting offsets of consumer group {group}")

    async def group_owners(self, group: str) -> dict[int, str]:
        """Partition -> client.id of the member that owns it, for a group's current assignment."""
        futures = self._client.describe_consumer_groups([group], request_timeout=TIMEOUT)
        desc = await _await(futures[group], f"describing consumer group {group}")
        return {
            tp.partition: member.client_id
            for member in desc.members
            for tp in (member.assignment.topic_partitions if member.assignment else [])
        }

    async def delete_group(self, group: str) -> None:
        """Delete a consumer group; a group that is gone or still has members is left alone."""
        futures = self._client.delete_consumer_groups([group], request_timeout=TIMEOUT)
        try:
            await _await(futures[group], f"deleting consumer group {group}")
        except (Unavailable, NotFound, FailedPrecondition) as exc:
            log.info("consumer group %s not deleted now: %s", group, exc)


def check_connection(config: Mapping[str, str | int | bool], timeout: float = 10.0) -> None:
    """Fail fast, with a clear message, when the cluster cannot be reached (blocking)."""
    try:
        confluent_kafka.admin.AdminClient(dict(config)).list_topics(timeout=timeout)
    except KafkaException as exc:
        raise Unavailable(f"cannot reach Kafka at {config.get('bootstrap.servers')}: {exc}") from exc
