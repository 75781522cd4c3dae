"""docs/migrating.md's commands, run as they are printed there against a gateway of their own:
only the port (8085 in the doc, a free one here) and the broker (this suite's) are the test's."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
import uuid
from pathlib import Path

from google.cloud import pubsub_v1

from tests.conftest import GatewayFactory
from tests.doc_examples import ROOT, blocks, example
from tests.gateways import emulator_env

DOC = "docs/migrating.md"


def test_the_serve_command_starts_a_gateway_whose_empty_pulls_answer_within_its_wait(
    start_gateway: GatewayFactory,
) -> None:
    words = shlex.split(example("docs/migrating.md", "migrating-serve"))
    assert words[:2] == [".venv/bin/pubsub-gateway", "serve"], words
    flags = words[2:]
    at = flags.index("--port")
    assert flags[at + 1] == "8085"  # the emulator's port, which the doc keeps
    del flags[at : at + 2]
    gw = start_gateway(*flags)  # after the harness's own flags: the doc's win
    settings_line = next(line for line in gw.log_paths[-1].read_text().splitlines() if "settings: {" in line)
    wait = float(flags[flags.index("--pull-max-wait-seconds") + 1])
    assert f"'pull_max_wait_seconds': {wait!r}" in settings_line

    uid = uuid.uuid4().hex[:8]
    topic, subscription = f"projects/my-project/topics/t-{uid}", f"projects/my-project/subscriptions/s-{uid}"
    with emulator_env(gw.address):
        publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    publisher.create_topic(name=topic)
    subscriber.create_subscription(name=subscription, topic=topic)
    publisher.publish(topic, b"hello").result(timeout=30)
    got = subscriber.pull(subscription=subscription, max_messages=10, timeout=60).received_messages
    assert [m.message.data for m in got] == [b"hello"]
    subscriber.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in got])
    # Nothing left: each Pull waits its --pull-max-wait-seconds (the harness's own is 2 s), then
    # answers with none.
    took = []
    for _ in range(3):
        started = time.monotonic()
        assert not subscriber.pull(subscription=subscription, max_messages=10, timeout=30).received_messages
        took.append(time.monotonic() - started)
    assert wait * 0.8 <= min(took) < wait + 0.8, took


def _printed_after(doc: str, name: str) -> str:
    """The ```text block that follows the example `name`: what the doc says it prints."""
    found = blocks(ROOT / doc)
    at = next(i for i, b in enumerate(found) if b.marker == "example" and b.value == name)
    following = found[at + 1]
    assert following.language == "text", following
    return following.text


def test_rest_answers_on_the_grpc_port_and_refuses_a_short_id(
    start_gateway: GatewayFactory, tmp_path: Path
) -> None:
    gw = start_gateway()
    assert gw.rest_address == gw.address  # one port, as the doc says
    script = example("docs/migrating.md", "migrating-rest")
    assert script.count("localhost:8085") == 2
    env = {k: v for k, v in os.environ.items() if k != "PUBSUB_EMULATOR_HOST"}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script.replace("localhost:8085", gw.address)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == _printed_after(DOC, "migrating-rest")
    assert re.search(r'"code": 400\b.*"INVALID_ARGUMENT"', done.stdout.splitlines()[1])
