"""One broker of three cut off from the other two under load, then healed.

A KRaft cluster of the test's own: three combined broker+controller nodes, each JVM under a
group id of its own (tests/faults/netcut.py). Two gateway processes serve an exactly-once, an
ordered and a plain subscription on it, each streamed through both by the official subscriber,
while the official publisher publishes with ordering keys. After a warm-up the node leading the
most partitions of the topic and of the subscriptions' lease logs is cut off from the other two
nodes, their broker and controller listeners both, in both directions; the gateways and the
clients still reach every node, the isolated one included. Then the cut heals.

What Kafka does meanwhile (4.x, its defaults): the isolated node's heartbeats no longer reach the
active controller, which fences it after `broker.session.timeout.ms` (9 s) and moves its
leaderships to the others; until then writes to its partitions wait, as its followers cannot
fetch (acks=all, min.insync.replicas 2). If it was the active controller itself, the other two
elect another first. The gateways and clients still reach the isolated node throughout, and it
still answers them, as the leader it believes it is.

The cluster's settings are Kafka's stock ones (gateway/kafka/local.py, STOCK) plus what the
cluster tests set (benchmarks/failover.py, CLUSTER_SETTINGS): replication factor 3 and
min.insync.replicas 2, so that a write confirmed is on two nodes and one node's isolation can
lose none; the brokers' session timeout is Kafka's own 9 s.

What must hold (issue 56): nothing confirmed is lost, no message comes again after a confirmed
exactly-once ack, and no ordering key skips ahead. Which node was cut off, whether it was the
active controller, and when it was fenced are FIGURE lines (and results, with FAULT_RESULTS).

FAULT_CUT_SECONDS sets how long the cut lasts (default 15 s, past the 9 s broker session).
"""

from __future__ import annotations

import itertools
import os
import re
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from benchmarks import failover
from gateway.kafka.local import STOCK, LocalKafka
from gateway.translate import names
from tests.faults import netcut
from tests.faults.conftest import Rig
from tests.faults.resources import topic_and_subscriptions

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

CUT_SECONDS = float(os.environ.get("FAULT_CUT_SECONDS", "15"))
WARM_UP = 8.0
AFTER = 25.0  # publishing goes on this long after the heal
NODES = (1, 2, 3)
HEAP_MB = 384
# What a node logs when it becomes the active controller (Kafka 4, QuorumController).
_ACTIVE = re.compile(r"\[QuorumController id=(\d+)\] Becoming the active controller at epoch (\d+)")


def node_wrap(gid: int) -> list[str]:
    """`netcut.Groups.wrap`, keeping the death signal the JVM's launcher sets (a changed group id
    clears it, and a JVM would outlive a test process killed with -9)."""
    setpriv, *rest = netcut.Groups.wrap(gid)
    return [setpriv, "--pdeathsig=keep", *rest]


def active_controller(kafka: LocalKafka) -> int | None:
    """The node that last became the active controller (the highest epoch in the nodes' logs)."""
    latest: tuple[int, int] | None = None
    for log in sorted(kafka.log_file.parent.parent.glob("node-*/broker.log")):
        for match in _ACTIVE.finditer(log.read_text(errors="replace")):
            epoch, node = int(match[2]), int(match[1])
            if latest is None or epoch > latest[0]:
                latest = (epoch, node)
    return latest[1] if latest is not None else None


def leaders(bootstrap: str, topics: list[str]) -> Counter[int]:
    """How many partitions of `topics` each node leads (-1: none)."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30)
    return Counter(
        partition.leader for name in topics for partition in metadata.topics[name].partitions.values()
    )


def lease_logs(bootstrap: str, prefix: str) -> list[str]:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30)
    logs = f"{names.internal_topic(prefix, 'acks')}."
    return sorted(name for name in metadata.topics if name.startswith(logs))


@pytest.mark.timeout(600 + 2 * CUT_SECONDS)
@pytest.mark.usefixtures("_cuts_possible")
def test_a_broker_cut_off_from_the_other_two_loses_nothing(
    log_dir: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    # The rig hands out the group ids, the nodes' too; its bootstrap is known once they run.
    rig = Rig("", log_dir, work, request.node.name)
    kafka: LocalKafka | None = None
    try:
        gids = {node: rig.groups.take() for node in NODES}
        kafka = LocalKafka(
            data_dir=tmp_path / "kafka",
            nodes=len(NODES),
            heap_mb=HEAP_MB,
            profile=STOCK,
            settings=failover.CLUSTER_SETTINGS,
            wrap=lambda node: node_wrap(gids[node]),
        )
        kafka.start(timeout=240)
        rig.bootstrap = kafka.bootstrap
        print(f"\ncluster at {kafka.bootstrap}, logs in {tmp_path / 'kafka'}", flush=True)
        _scenario(kafka, rig, gids)
    finally:
        rig.close()
        if kafka is not None:
            kafka.stop()


def _scenario(kafka: LocalKafka, rig: Rig, gids: dict[int, int]) -> None:
    a, b = rig.gateway(), rig.gateway()
    topic, eo, ordered, plain = topic_and_subscriptions(b.address, [a.address, b.address])
    subs = [eo, ordered, plain]
    publish_seconds = WARM_UP + CUT_SECONDS + AFTER
    load = rig.load(topic, subs, publish_via=b.address, publish_seconds=publish_seconds)
    time.sleep(WARM_UP)

    # The lease logs exist once the subscriptions are streamed, which the warm-up saw to.
    logs = lease_logs(kafka.bootstrap, rig.prefix)
    led = leaders(kafka.bootstrap, [names.kafka_topic_for(names.topic(topic)), *logs])
    isolated = max(NODES, key=lambda node: (led[node], -node))
    others = [node for node in NODES if node != isolated]
    controller = active_controller(kafka)
    print(
        f"FIGURE broker partition: cutting off node {isolated}, leader of {led[isolated]} of "
        f"{sum(led.values())} partitions (the topic's and {len(logs)} lease logs'; by node "
        f"{dict(sorted(led.items()))}); the active controller is node {controller}",
        flush=True,
    )
    pairs = [(gids[isolated], [port for node in others for port in kafka.node_ports(node)])]
    pairs += [(gids[node], list(kafka.node_ports(isolated))) for node in others]
    cut_at = time.time()
    with rig.cut(f"node {isolated} cut off from nodes {others}", pairs):
        time.sleep(CUT_SECONDS)
    fenced = failover.fenced_at(kafka, isolated, cut_at)
    fenced_s = None if fenced is None else round(fenced - cut_at, 1)
    controller_after = active_controller(kafka)
    print(
        f"FIGURE broker partition: node {isolated} fenced "
        f"{'never' if fenced_s is None else f'{fenced_s} s after the cut'}; the active controller "
        f"after the heal is node {controller_after}",
        flush=True,
    )

    load.wait(publish_seconds + 240)
    verdict = rig.verdict(subs, ordered=[ordered.name])
    events = rig.events()
    start, end = (e["t"] for e in events if e["ev"] == "fault")
    confirmed = sorted(e["t"] for e in events if e["ev"] == "publish" and e.get("ok"))
    gaps = [(later - earlier, earlier) for earlier, later in itertools.pairwise(confirmed)]
    stall, stall_at = max(gaps, default=(0.0, start))
    print(
        f"FIGURE broker partition: the longest wait between confirmed publishes {stall:.1f} s, "
        f"from {stall_at - start:.1f} s after the cut (healed after {end - start:.1f} s)",
        flush=True,
    )
    rig.result(
        isolated_node=isolated,
        isolated_was_controller=isolated == controller,
        partitions_led_by_isolated=led[isolated],
        partitions_led_by_node={str(k): v for k, v in sorted(led.items())},
        controller_after_heal=controller_after,
        fenced_after_cut_s=fenced_s,
        longest_publish_stall_s=round(stall, 1),
        longest_publish_stall_from_cut_s=round(stall_at - start, 1),
    )
    assert verdict.confirmed > 0.8 * 50 * publish_seconds, verdict.summary()
    assert verdict.ok, verdict.summary()
