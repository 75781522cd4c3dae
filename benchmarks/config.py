"""How long and how hard each scenario runs, in quick and full mode."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class PublishCase:
    batch: int  # messages per Publish request
    procs: int  # generator processes
    window: int  # Publish calls in flight per process


@dataclasses.dataclass(frozen=True, slots=True)
class Mode:
    name: str
    publish_seconds: float
    publish_cases: tuple[PublishCase, ...]
    deliver_messages: int
    deliver_procs: tuple[int, ...]  # one Pull+Ack run per entry, with that many processes
    latency_rates: tuple[int, ...]
    latency_seconds: float
    backlog_sizes: tuple[int, ...]
    backlog_pull: int  # messages pulled and acked at every backlog size
    scaleout_messages: int
    scaleout_procs: int  # Pull+Ack processes, split evenly over the gateways

    @property
    def quick(self) -> bool:
        return self.name == "quick"


_PUBLISH = (PublishCase(1, 3, 16), PublishCase(100, 3, 2), PublishCase(1000, 1, 2))

QUICK = Mode(
    name="quick",
    publish_seconds=1.5,
    publish_cases=_PUBLISH,
    deliver_messages=20_000,
    deliver_procs=(3,),
    latency_rates=(500, 2000),
    latency_seconds=1.5,
    backlog_sizes=(10**3, 10**4),
    backlog_pull=1000,
    scaleout_messages=20_000,
    scaleout_procs=4,
)

FULL = Mode(
    name="full",
    publish_seconds=8.0,
    publish_cases=_PUBLISH,
    deliver_messages=200_000,
    deliver_procs=(2, 4),
    latency_rates=(500, 2000, 10_000),
    latency_seconds=10.0,
    backlog_sizes=(10**4, 10**5, 10**6),
    backlog_pull=10_000,
    scaleout_messages=200_000,
    scaleout_procs=4,
)
