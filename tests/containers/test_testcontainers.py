"""PubSubKafkaContainer from a user's own pytest suite, as docs/testing.md shows it: the example
block with an official client publishing and pulling inside it, run in a pytest run of its own.
Only the Kafka image's name is put in, where apache/kafka cannot be pulled."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.containers.conftest import KAFKA_IMAGE
from tests.doc_examples import example

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

BODY = textwrap.indent(
    textwrap.dedent(
        """
        from google.cloud import pubsub_v1
        publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
        topic, sub = "projects/users-suite/topics/orders", "projects/users-suite/subscriptions/audit"
        publisher.create_topic(name=topic)
        subscriber.create_subscription(name=sub, topic=topic)
        publisher.publish(topic, b"order 1", origin="container").result(timeout=60)
        got = subscriber.pull(subscription=sub, max_messages=1, timeout=60).received_messages
        assert got[0].message.data == b"order 1" and got[0].message.attributes["origin"] == "container"
        print("PULLED", got[0].message.data)
        """
    ),
    "    ",
)


def test_a_users_suite_runs_on_the_containers(engine: dict[str, str], tmp_path: Path) -> None:
    code = example("docs/testing.md", "testing-container")
    assert "    ...\n" in code and "PubSubKafkaContainer()" in code
    code = code.replace("PubSubKafkaContainer()", f"PubSubKafkaContainer(kafka_image={KAFKA_IMAGE!r})")
    code = code.replace("    ...\n", BODY)
    suite = tmp_path / "test_users_suite.py"
    suite.write_text("def test_orders_reach_the_audit():\n" + textwrap.indent(code, "    "))
    env = {**os.environ, **engine, "TESTCONTAINERS_RYUK_DISABLED": "true"}
    env.pop("PUBSUB_EMULATOR_HOST", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", str(suite)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "PULLED b'order 1'" in done.stdout and "1 passed" in done.stdout
    # nothing left behind: the class removes its containers and its network
    leftover = subprocess.run(
        ["docker", "ps", "-aq", "--filter", "label=org.testcontainers=true"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert leftover.strip() == ""
