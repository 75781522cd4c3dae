"""librdkafka's statistics, reduced to what /metrics reports about the Kafka client's health.

A client built with `statistics.interval.ms` calls its `stats_cb` with a JSON document every
interval, from the thread that polls it (the producer's poll thread). `ClientStats.receive` is
that callback: it parses the document there and keeps the summary; the metrics read the latest
summary when scraped. Field meanings: librdkafka's STATISTICS.md.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from typing import Any

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerStats:
    name: str  # "host:port/id"
    up: bool  # state UP: connected and usable
    state: str  # librdkafka's state: INIT, DOWN, CONNECT, AUTH, APIVERSION_QUERY, AUTH_HANDSHAKE, UP, UPDATE
    rtt_avg_s: float  # round-trip time of requests, this interval (seconds)
    rtt_p99_s: float
    in_flight: int  # requests sent, awaiting a response (waitresp_cnt)
    queued: int  # requests waiting to be sent (outbuf_cnt)
    request_timeouts: int  # since the client started
    connects: int
    disconnects: int
    tx_errors: int
    rx_errors: int


@dataclasses.dataclass(frozen=True, slots=True)
class Summary:
    client: str  # librdkafka's name of the client, e.g. rdkafka#producer-1
    queue_messages: int  # messages in the producer's queue, not yet confirmed (msg_cnt)
    queue_bytes: int  # their size (msg_size)
    brokers: tuple[BrokerStats, ...]
    taken_at: float  # time.monotonic() when received


def summarize(document: str, taken_at: float) -> Summary:
    """The summary of one statistics document. Brokers that are only bootstrap addresses or a
    coordinator's alias (node id -1) are left out: they duplicate a real broker."""
    data: dict[str, Any] = json.loads(document)
    brokers = []
    for b in (data.get("brokers") or {}).values():
        if int(b.get("nodeid", -1)) < 0:
            continue
        rtt = b.get("rtt") or {}
        brokers.append(
            BrokerStats(
                name=str(b.get("name", "")),
                up=b.get("state") == "UP",
                state=str(b.get("state", "")),
                rtt_avg_s=float(rtt.get("avg", 0)) / 1e6,
                rtt_p99_s=float(rtt.get("p99", 0)) / 1e6,
                in_flight=int(b.get("waitresp_cnt", 0)),
                queued=int(b.get("outbuf_cnt", 0)),
                request_timeouts=int(b.get("req_timeouts", 0)),
                connects=int(b.get("connects", 0)),
                disconnects=int(b.get("disconnects", 0)),
                tx_errors=int(b.get("txerrs", 0)),
                rx_errors=int(b.get("rxerrs", 0)),
            )
        )
    brokers.sort(key=lambda b: b.name)
    return Summary(
        client=str(data.get("name", "")),
        queue_messages=int(data.get("msg_cnt", 0)),
        queue_bytes=int(data.get("msg_size", 0)),
        brokers=tuple(brokers),
        taken_at=taken_at,
    )


class ClientStats:
    """The latest statistics of one client. `receive` runs on the client's poll thread; the
    summary is replaced whole (one reference assignment), so readers on other threads see
    either the old one or the new one."""

    def __init__(self, interval_seconds: float) -> None:
        self.interval_seconds = interval_seconds
        self.latest: Summary | None = None

    def config(self) -> dict[str, Any]:
        """What to add to the client's configuration: nothing when statistics are off."""
        if self.interval_seconds <= 0:
            return {}
        return {"statistics.interval.ms": int(self.interval_seconds * 1000), "stats_cb": self.receive}

    def receive(self, document: str) -> None:
        try:
            self.latest = summarize(document, time.monotonic())
        except (ValueError, TypeError, AttributeError) as exc:
            log.warning("unreadable librdkafka statistics: %s", exc)
