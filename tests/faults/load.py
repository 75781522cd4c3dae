"""The fault suite's load: the official Python clients publishing and receiving, every step recorded.

Run as a process of its own (`python -m tests.faults.load CONFIG.json`), so that a test can cut
it off from its gateway (started under a group id of its own, tests/faults/netcut.py) as well as
cut the gateways. It publishes at a steady rate for `publish_seconds` through `publish_via`, with
ordering keys on most messages, and subscribes to each subscription through each of its gateways
with StreamingPull. It nacks every `nack_every`-th first delivery and acks the rest (exactly-once
subscriptions with `ack_with_response`). Once publishing ends it waits until every confirmed
publish has come on every subscription, or `drain_seconds` pass. Every event goes to the
history file as it happens (tests/faults/history.py).

An exactly-once ack is recorded "SUCCESS" only when the server confirmed it. google-cloud-pubsub
(2.44) also completes an ack's future with SUCCESS when its Acknowledge RPC failed with a status
that carries no `grpc-status-details-bin` and that it does not retry, CANCELLED for one (its
streaming_pull_manager._process_requests): grpc's server answers so a call that arrives as it
shuts down. The load watches each Acknowledge RPC and records such an ack "SUCCESS_ASSUMED":
the client library's word, not the server's (docs/faults.md).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.faults.history import Recorder


@dataclass
class Sub:
    name: str
    via: list[str]
    exactly_once: bool = False


@dataclass
class Config:
    topic: str
    subscriptions: list[Sub]
    publish_via: str
    history: str
    rate: float = 50.0
    publish_seconds: float = 30.0
    drain_seconds: float = 90.0
    keys: int = 4  # ordering keys k0..k(n-1); every fifth message has none
    nack_every: int = 25
    data_bytes: int = 256
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Config:
        raw = json.loads(path.read_text())
        raw["subscriptions"] = [Sub(**s) for s in raw["subscriptions"]]
        return cls(**raw)


def _client(kind: str, address: str, **kwargs: Any) -> Any:
    from google.cloud import pubsub_v1

    os.environ["PUBSUB_EMULATOR_HOST"] = address  # read when the client is made
    return getattr(pubsub_v1, kind)(**kwargs)


class Load:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.record = Recorder(Path(config.history))
        self._confirmed: set[str] = set()
        self._received: dict[str, set[str]] = {s.name: set() for s in config.subscriptions}
        self._first_seen: dict[str, set[str]] = {s.name: set() for s in config.subscriptions}
        self._lock = threading.Lock()
        self._streams: list[Any] = []
        self._subscribers: list[Any] = []
        # Ack ids whose Acknowledge RPC failed with a status the client does not retry and that
        # carries no details: a SUCCESS for them comes from the client library alone.
        self._unconfirmed: set[str] = set()
        self._stopping = False

    def _watch_acks(self) -> None:
        """Note the ack ids of every Acknowledge RPC that fails without status details."""
        from google.api_core import exceptions
        from google.cloud import pubsub_v1

        acknowledge = pubsub_v1.SubscriberClient.acknowledge

        def watched(client: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return acknowledge(client, *args, **kwargs)
            except exceptions.GoogleAPICallError as exc:
                trailers = exc.response.trailing_metadata() if exc.response is not None else None
                if not any(k == "grpc-status-details-bin" for k, _ in trailers or ()):
                    ids = list(kwargs.get("ack_ids") or [])
                    self.record("ack_rpc_failed", error=type(exc).__name__, ack_ids=len(ids))
                    with self._lock:
                        self._unconfirmed.update(ids)
                raise

        pubsub_v1.SubscriberClient.acknowledge = watched  # type: ignore[method-assign]

    def run(self) -> int:
        from google.cloud import pubsub_v1

        self._watch_acks()
        for sub in self.config.subscriptions:
            for address in sub.via:
                client = _client("SubscriberClient", address)
                self._subscribers.append(client)
                callback = self._callback(sub, address)
                self._streams.append(client.subscribe(sub.name, callback))
        options = pubsub_v1.types.PublisherOptions(enable_message_ordering=True)
        publisher = _client("PublisherClient", self.config.publish_via, publisher_options=options)
        self._publish(publisher)
        # stop() cancels a key's queued batches while it holds the client's batch lock, and runs
        # their callbacks on this thread: resume_publish there would wait on that lock for ever.
        self._stopping = True
        publisher.stop()
        self.record("phase", what="published")
        self._drain()
        for stream in self._streams:
            stream.cancel()
        for stream in self._streams:
            try:
                stream.result(timeout=30)
            except Exception:  # a cancelled stream ends with its own error; nothing to keep
                pass
        for client in self._subscribers:
            client.close()
        self.record("phase", what="done")
        self.record.close()
        return 0

    def _publish(self, publisher: Any) -> None:
        cfg = self.config
        seqs: dict[str, int] = {}
        period = 1.0 / cfg.rate
        start = next_at = time.monotonic()
        n = 0
        while time.monotonic() - start < cfg.publish_seconds:
            key = "" if n % 5 == 4 else f"k{n % cfg.keys}"
            n += 1
            seq = seqs.get(key, 0)
            seqs[key] = seq + 1
            data = f"{key}/{seq}/".encode().ljust(cfg.data_bytes, b".")
            future = publisher.publish(cfg.topic, data, ordering_key=key, key=key, seq=str(seq))
            future.add_done_callback(lambda f, k=key, s=seq: self._published(publisher, f, k, s))
            next_at += period
            time.sleep(max(0.0, next_at - time.monotonic()))

    def _published(self, publisher: Any, future: Any, key: str, seq: int) -> None:
        try:
            message_id = future.result()
        except Exception as exc:
            self.record("publish", key=key, seq=seq, error=type(exc).__name__)
            if key and not self._stopping:  # an ordering key stops at its first failure until resumed
                publisher.resume_publish(self.config.topic, key)
            return
        with self._lock:
            self._confirmed.add(f"{key}/{seq}")
        self.record("publish", key=key, seq=seq, ok=message_id)

    def _callback(self, sub: Sub, address: str) -> Any:
        record, nack_every = self.record, self.config.nack_every

        def on_message(message: Any) -> None:
            key, seq = message.attributes["key"], int(message.attributes["seq"])
            mid = f"{key}/{seq}"
            record("deliver", sub=sub.name, key=key, seq=seq, via=address, attempt=message.delivery_attempt)
            with self._lock:
                first = mid not in self._first_seen[sub.name]
                self._first_seen[sub.name].add(mid)
            if first and nack_every and seq % nack_every == nack_every - 1:
                message.nack()
                record("nack", sub=sub.name, key=key, seq=seq)
                return
            if sub.exactly_once:
                future = message.ack_with_response()
                ack_id = message.ack_id
                future.add_done_callback(lambda f: self._acked(sub.name, key, seq, ack_id, f))
            else:
                message.ack()
                record("ack", sub=sub.name, key=key, seq=seq, result="sent")
                with self._lock:
                    self._received[sub.name].add(mid)

        return on_message

    def _acked(self, sub: str, key: str, seq: int, ack_id: str, future: Any) -> None:
        try:
            future.result()
        except Exception as exc:
            self.record("ack", sub=sub, key=key, seq=seq, result=type(exc).__name__)
            return
        with self._lock:
            assumed = ack_id in self._unconfirmed
        self.record("ack", sub=sub, key=key, seq=seq, result="SUCCESS_ASSUMED" if assumed else "SUCCESS")
        with self._lock:
            self._received[sub].add(f"{key}/{seq}")

    def _drain(self) -> None:
        deadline = time.monotonic() + self.config.drain_seconds
        while time.monotonic() < deadline:
            with self._lock:
                if all(self._confirmed <= got for got in self._received.values()):
                    return
            time.sleep(0.5)


def main(argv: list[str]) -> int:
    return Load(Config.load(Path(argv[0]))).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
