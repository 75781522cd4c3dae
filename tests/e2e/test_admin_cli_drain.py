"""`pubsub-gateway pull --all --ack` loses nothing when cut off part-way: by SIGINT, by a closed
stdout, by its gateway killed. Every message it acknowledged is in its output; what it did not
write comes again. Checked by draining the rest with the official client: the output and the
rest together hold every published message."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import IO

import pytest

from tests.conftest import GatewayFactory
from tests.e2e.clients import clients
from tests.gateways import GatewayProcess

pytestmark = pytest.mark.integration
COUNT = 20_000
PROJECT = "drain-e2e"


def _backlog(gw: GatewayProcess) -> tuple[str, set[str]]:
    """A subscription with COUNT messages m0.. published through the official client."""
    pub, sub = clients(gw)
    tag = uuid.uuid4().hex[:8]
    topic, subscription = f"projects/{PROJECT}/topics/t-{tag}", f"projects/{PROJECT}/subscriptions/s-{tag}"
    pub.create_topic(name=topic)
    sub.create_subscription(name=subscription, topic=topic, ack_deadline_seconds=10)
    texts = {f"m{i}" for i in range(COUNT)}
    for future in [pub.publish(topic, t.encode(), n=t) for t in sorted(texts)]:
        future.result(timeout=60)
    sub.close()
    return subscription, texts


def _drain(gw: GatewayProcess, subscription: str, stdout: int | IO[bytes]) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "PUBSUB_PROJECT_ID"}
    env["PUBSUB_EMULATOR_HOST"] = gw.address
    command = [sys.executable, "-m", "gateway", "pull", subscription, "--all", "--ack", "--format", "json"]
    return subprocess.Popen(command, stdout=stdout, stderr=subprocess.PIPE, env=env)


def _written(path: Path) -> list[str]:
    """The messages in a drain's output; a line cut off mid-write counts as not written."""
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line)["message"]["attributes"]["n"])
        except (ValueError, KeyError):
            continue
    return out


def _rest(gw: GatewayProcess, subscription: str) -> list[str]:
    """Everything still owed, pulled and acked with the official client (ack deadlines of what
    the drain left unacked pass meanwhile)."""
    _, sub = clients(gw)
    got: list[str] = []
    quiet_since = time.monotonic()
    try:
        while time.monotonic() - quiet_since < 15:  # > the 10 s ack deadline of what was cut off
            received = sub.pull(subscription=subscription, max_messages=1000, timeout=30).received_messages
            if received:
                got += [m.message.attributes["n"] for m in received]
                sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in received])
                quiet_since = time.monotonic()
    finally:
        sub.close()
    return got


def _wait_for_output(path: Path, lines: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while path.read_text().count("\n") < lines:
        assert proc.poll() is None, "the drain ended before it was interrupted"
        assert time.monotonic() < deadline, "the drain wrote nothing"
        time.sleep(0.01)


def _check(texts: set[str], written: list[str], rest: list[str]) -> None:
    assert 0 < len(written) < COUNT, "the drain was cut off part-way"
    missing = texts - set(written) - set(rest)
    assert not missing, f"{len(missing)} acknowledged messages are in no output, e.g. {sorted(missing)[:5]}"


def test_sigint_part_way_loses_no_acknowledged_message(
    shared_gateway: GatewayProcess, tmp_path: Path
) -> None:
    subscription, texts = _backlog(shared_gateway)
    out = tmp_path / "out.json"
    with out.open("wb") as f:
        proc = _drain(shared_gateway, subscription, f)
        _wait_for_output(out, 1500, proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    _check(texts, _written(out), _rest(shared_gateway, subscription))


def test_a_closed_stdout_loses_no_acknowledged_message(
    shared_gateway: GatewayProcess, tmp_path: Path
) -> None:
    """As `pull ... | head -n 2500`: the reader goes away; what it did not read is not acked."""
    subscription, texts = _backlog(shared_gateway)
    proc = _drain(shared_gateway, subscription, subprocess.PIPE)
    assert proc.stdout is not None
    read = [proc.stdout.readline() for _ in range(2500)]
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    assert b"not acknowledged" in err, err
    written = [json.loads(line)["message"]["attributes"]["n"] for line in read]
    _check(texts, written, _rest(shared_gateway, subscription))


def test_its_gateway_killed_part_way_loses_no_acknowledged_message(
    start_gateway: GatewayFactory, tmp_path: Path
) -> None:
    prefix = f"drain{uuid.uuid4().hex[:6]}"
    gw = start_gateway(prefix=prefix)
    subscription, texts = _backlog(gw)
    out = tmp_path / "out.json"
    with out.open("wb") as f:
        proc = _drain(gw, subscription, f)
        _wait_for_output(out, 1500, proc)
        gw.kill()
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    again = start_gateway(prefix=prefix)  # the subscription's state is in Kafka
    _check(texts, _written(out), _rest(again, subscription))
