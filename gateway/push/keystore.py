"""The keys that sign push tokens, the same in every gateway process.

Either one RSA key from a PEM file (`--push-auth-key-file`), or keys the gateway generates and
keeps in the compacted topic `<internal prefix>_gpushkeys` (record key: the key id; value: the
key as JSON with its PKCS#8 PEM). Every process follows the topic, so all of them sign with the
same keys and publish the same key set. When the newest key is older than the rotation period,
any process adds a new one; keys are published until they are older than the rotation period
plus two hours (tokens live one hour), then tombstoned.

The private keys are stored unencrypted: restrict access to the topic with Kafka ACLs, or give
the gateway a key file instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

from gateway.clock import now_ms
from gateway.kafka.admin import Admin, TopicSpec
from gateway.kafka.compacted import CompactedFollower
from gateway.kafka.producer import Producer
from gateway.push import auth
from gateway.translate import names

log = logging.getLogger(__name__)
HOUR_MS = 3_600_000
CHECK_SECONDS = 60.0


class KeyStore:
    def __init__(
        self,
        admin: Admin,
        producer: Producer,
        kafka_config: dict[str, Any],
        internal_prefix: str,
        key_file: Path | None,
        rotation_hours: float,
    ) -> None:
        self._admin = admin
        self._producer = producer
        self.topic = names.internal_topic(internal_prefix, "pushkeys")
        self._key_file = key_file
        self._rotation_ms = int(rotation_hours * HOUR_MS)
        self._keys: dict[str, auth.SigningKey] = {}
        self._follower = CompactedFollower(
            kafka_config,
            self.topic,
            "pushkeys",
            self._on_record,
            late=f"could not read the push key topic {self.topic}",
        )
        self._task: asyncio.Task[None] | None = None

    def keys(self) -> list[auth.SigningKey]:
        """The keys to publish (and sign with): none older than the retention."""
        if self._key_file is not None:
            return list(self._keys.values())
        oldest = now_ms() - self._retention_ms
        return [k for k in self._keys.values() if k.created_ms >= oldest]

    @property
    def _retention_ms(self) -> int:
        return self._rotation_ms + 2 * HOUR_MS

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        if self._key_file is not None:
            key = auth.key_from_pem(await asyncio.to_thread(self._key_file.read_bytes))
            self._keys = {key.kid: key}
            log.info("push tokens are signed with key %s from %s", key.kid, self._key_file)
            return
        await self._ensure_topic()
        await self._follower.start()
        await self._rotate_if_due()
        self._task = asyncio.create_task(self._rotation_loop(), name="push key rotation")

    async def stop(self) -> None:
        """Idempotent."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._follower.stop()

    async def _ensure_topic(self) -> None:
        # Compacted, or retention would delete the signing keys and endpoints would reject
        # every token after a restart.
        await self._admin.ensure_topic(TopicSpec(self.topic, 1, {"cleanup.policy": "compact"}))

    # -- following the topic ---------------------------------------------------------------

    def _on_record(self, key: bytes, value: bytes | None, offset: int) -> None:
        kid = key.decode(errors="replace")
        if value is None:
            self._keys.pop(kid, None)
            return
        try:
            self._keys[kid] = auth.decode_key(value)
        except (ValueError, KeyError, TypeError):
            log.exception("skipping an unreadable push key record at offset %d", offset)

    # -- rotation --------------------------------------------------------------------------

    async def _rotation_loop(self) -> None:
        period = min(CHECK_SECONDS, max(1.0, self._rotation_ms / 4000))
        while True:
            await asyncio.sleep(period)
            try:
                await self._rotate_if_due()
            except Exception:
                log.exception("push key rotation failed; retrying in %.0f s", period)

    async def _rotate_if_due(self) -> None:
        now = now_ms()
        newest = max((k.created_ms for k in self._keys.values()), default=None)
        if newest is not None and now - newest < self._rotation_ms:
            return
        key = await asyncio.to_thread(auth.new_key, now)
        await self._producer.send(self.topic, [(key.kid.encode(), auth.encode_key(key), None)], partition=0)
        self._keys[key.kid] = key
        log.info("new push signing key %s", key.kid)
        expired = [k.kid for k in self._keys.values() if now - k.created_ms > self._retention_ms]
        if expired:
            tombstones = [(kid.encode(), None, None) for kid in expired]
            await self._producer.send(self.topic, tombstones, partition=0)
            for kid in expired:
                self._keys.pop(kid, None)
