"""gateway.kafka.local: a real Kafka broker JVM, started, used, restarted and stopped."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewTopic as NewTopic  # type: ignore[attr-defined]

from gateway.kafka.local import KAFKA_VERSION, LocalKafka, default_cache_dir, resolve_broker

pytestmark = pytest.mark.integration


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "State:\tZ" not in status.read_text()


def _create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)


def _produce(bootstrap: str, topic: str, value: bytes) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    producer.produce(topic, value=value, key=b"k")
    assert producer.flush(30) == 0


def _consume_one(bootstrap: str, topic: str) -> bytes:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,  # Kafka's default minimum
            "heartbeat.interval.ms": 1000,
        }
    )
    try:
        consumer.subscribe([topic])
        for _ in range(60):
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            value = msg.value()
            assert isinstance(value, bytes)
            return value
        raise AssertionError(f"no record arrived on {topic}")
    finally:
        consumer.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_produce_consume_then_stop_leaves_no_jvm() -> None:
    kafka = LocalKafka(heap_mb=256)
    bootstrap = kafka.start(timeout=150)
    pid = kafka.pid
    log_file = kafka.log_file
    try:
        assert bootstrap.startswith("127.0.0.1:") and pid is not None and _alive(pid)
        _create_topic(bootstrap, "local-kafka-smoke")
        _produce(bootstrap, "local-kafka-smoke", b"hello kafka")
        assert _consume_one(bootstrap, "local-kafka-smoke") == b"hello kafka"
    finally:
        kafka.stop()
    assert not _alive(pid), "the broker JVM outlived stop()"
    assert not kafka.running and not log_file.exists()  # the temporary data dir is gone
    kafka.stop()  # idempotent
    with pytest.raises(RuntimeError):
        _ = kafka.bootstrap


def test_cached_restart_needs_no_mvn_and_keeps_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = default_cache_dir()
    resolve_broker(cache)  # usually a no-op: the first test resolved already
    assert (cache / f"kafka-{KAFKA_VERSION}" / "resolved.ok").is_file()
    real_run = subprocess.run

    def no_mvn(cmd: Any, *args: Any, **kwargs: Any) -> Any:
        assert "mvn" not in Path(str(cmd[0])).name, f"unexpected Maven call: {cmd}"
        return real_run(cmd, *args, **kwargs)

    real_which = shutil.which

    def which(name: str, *args: Any, **kwargs: Any) -> str | None:
        assert name != "mvn", "Maven was looked up although the jars are cached"
        return real_which(name, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", no_mvn)  # local.py shares these modules
    monkeypatch.setattr(shutil, "which", which)

    data = tmp_path / "kafka-data"
    with LocalKafka(cache_dir=cache, data_dir=data, heap_mb=256) as first:
        _create_topic(first.bootstrap, "persisted")
        _produce(first.bootstrap, "persisted", b"still here")
        first_bootstrap = first.bootstrap
    cluster_id = (data / "kraft-logs" / "meta.properties").read_text()

    port = _free_port()  # a different client port (the controller port moves as well)
    with LocalKafka(cache_dir=cache, data_dir=data, port=port, heap_mb=256) as second:
        assert second.bootstrap == f"127.0.0.1:{port}" != first_bootstrap
        topics = AdminClient({"bootstrap.servers": second.bootstrap}).list_topics(timeout=30).topics
        assert "persisted" in topics
        assert _consume_one(second.bootstrap, "persisted") == b"still here"
    assert (data / "kraft-logs" / "meta.properties").read_text() == cluster_id
    assert (data / "broker.log").stat().st_size > 0
