"""A three-broker cluster loses the broker leading most partitions, kill -9, under load from the
official clients: no acknowledged publish is lost, no message comes again after its ack was
confirmed (exactly-once), and the clients see no error they do not retry.

The time deliveries take to resume is a figure, not asserted here: `python -m
benchmarks.failover` writes it to benchmarks/results/failover.json (docs/kafka.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import failover

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


@pytest.mark.timeout(600)
def test_kill_9_of_a_leader_loses_nothing_acknowledged(log_dir: Path) -> None:
    figures = failover.run(rounds=1, rate=100.0, before=6.0, after=20.0, log_dir=log_dir)
    assert figures["acknowledged_publishes"] > 1500, figures
    assert figures["lost_in_total"] == 0, figures
    assert figures["redelivered_after_confirmed_ack"] == 0, figures
    assert figures["publish_errors"] == {}, figures  # the publisher retried what it saw
    (only,) = figures["rounds"]
    assert only["killed"] == "leader"
    assert only["resumed_any_s"] is not None, figures  # deliveries went on after the kill
