"""Resources declared at start, as users start gateways (docs/bootstrap.md): `pubsub-gateway
serve --bootstrap-file` in two processes started at once, the community images' PUBSUB_PROJECT1,
and a bad file stopping the start with status 1 and one line naming its line."""

from __future__ import annotations

import shlex
import subprocess
import threading
import uuid
from pathlib import Path

import pytest
from google.cloud import pubsub_v1

from tests.conftest import GatewayFactory
from tests.doc_examples import example
from tests.gateways import GatewayProcess, emulator_env, serve_command

pytestmark = pytest.mark.integration
DOC = "docs/bootstrap.md"


def _clients(gw: GatewayProcess) -> tuple[pubsub_v1.PublisherClient, pubsub_v1.SubscriberClient]:
    with emulator_env(gw.address):
        return pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()


def _doc_flags(path: Path) -> list[str]:
    """The doc's serve command's flags, its file this test's."""
    words = shlex.split(example("docs/bootstrap.md", "bootstrap-serve"))
    assert words[:2] == ["pubsub-gateway", "serve"] and "bootstrap.yaml" in words, words
    return [str(path) if w == "bootstrap.yaml" else w for w in words[2:]]


def test_two_processes_started_at_once_with_the_docs_file_agree(
    start_gateway: GatewayFactory, tmp_path: Path
) -> None:
    project = f"boot-{uuid.uuid4().hex[:8]}"
    path = tmp_path / "bootstrap.yaml"
    path.write_text(
        example("docs/bootstrap.md", "bootstrap-file").replace("id: my-project", f"id: {project}")
    )
    prefix = f"t{uuid.uuid4().hex[:8]}"
    started: list[GatewayProcess] = []
    failed: list[BaseException] = []

    def start() -> None:
        try:
            started.append(start_gateway(*_doc_flags(path), prefix=prefix))
        except BaseException as exc:  # the test fails below, with the gateway's log
            failed.append(exc)

    threads = [threading.Thread(target=start) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    assert not failed and len(started) == 2, failed
    p = f"projects/{project}"
    for gw in started:  # READY: each has everything, as the file says
        publisher, subscriber = _clients(gw)
        assert {t.name for t in publisher.list_topics(project=p)} == {
            f"{p}/topics/orders",
            f"{p}/topics/orders-dead-letter",
            f"{p}/topics/audit",
        }
        subs = {s.name: s for s in subscriber.list_subscriptions(project=p)}
        assert set(subs) == {f"{p}/subscriptions/{s}" for s in ("orders-worker", "orders-push", "audit-all")}
        worker = subs[f"{p}/subscriptions/orders-worker"]
        assert worker.ack_deadline_seconds == 30 and worker.enable_message_ordering
        assert worker.dead_letter_policy.dead_letter_topic == f"{p}/topics/orders-dead-letter"
    logs = "".join(gw.log_paths[-1].read_text() for gw in started)
    for made in ("schema order", "topic orders", "subscription orders-worker"):
        kind, rid = made.split()
        collection = {"schema": "schemas", "topic": "topics", "subscription": "subscriptions"}[kind]
        assert logs.count(f"bootstrap: created {kind} {p}/{collection}/{rid} ") == 1, made  # by one of them
    with emulator_env(started[0].address):
        schemas = pubsub_v1.SchemaServiceClient()
    assert len(list(schemas.list_schema_revisions(name=f"{p}/schemas/order"))) == 1


def test_the_community_variable_declares_topics_and_subscriptions(
    start_gateway: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = f"boot-{uuid.uuid4().hex[:8]}"
    *assignments, command, verb = shlex.split(example("docs/bootstrap.md", "bootstrap-env"))
    assert (command, verb) == ("pubsub-gateway", "serve")
    for assignment in assignments:
        name, _, value = assignment.partition("=")
        monkeypatch.setenv(name, value.replace("my-project", project))  # the child inherits it
    gw = start_gateway()
    publisher, subscriber = _clients(gw)
    p = f"projects/{project}"
    assert {t.name for t in publisher.list_topics(project=p)} == {
        f"{p}/topics/orders",
        f"{p}/topics/invoices",
    }
    subs = {s.name: s.topic for s in subscriber.list_subscriptions(project=p)}
    assert subs == {
        f"{p}/subscriptions/orders-worker": f"{p}/topics/orders",
        f"{p}/subscriptions/orders-audit": f"{p}/topics/orders",
    }


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(serve_command(*args), capture_output=True, text=True, timeout=120, check=False)


def test_a_bad_entry_stops_the_start_naming_the_file_and_its_line(
    start_gateway: GatewayFactory, kafka_bootstrap: str, tmp_path: Path
) -> None:
    live = start_gateway()
    project = f"boot-{uuid.uuid4().hex[:8]}"
    path = tmp_path / "bootstrap.yaml"
    path.write_text(
        f"projects:\n  - id: {project}\n    topics:\n      - name: fresh\n"
        "    subscriptions:\n      - name: worker\n        topic: ghost\n"
    )
    done = _serve(
        "--kafka-bootstrap", kafka_bootstrap, "--internal-prefix", live.prefix, "--bootstrap-file", str(path)
    )
    assert done.returncode == 1, done.stderr
    assert (
        f"pubsub-gateway: cannot start: --bootstrap-file {path}, line 7: it names the topic "
        f"projects/{project}/topics/ghost, which is not declared and does not exist"
    ) in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    # Nothing of the file was applied: a write through the live gateway returns once that one has
    # read the resource log up to it, so it holds everything written before.
    publisher, _ = _clients(live)
    publisher.create_topic(name=f"projects/{project}/topics/marker")
    assert [t.name for t in publisher.list_topics(project=f"projects/{project}")] == [
        f"projects/{project}/topics/marker"
    ]
    # A file refused as it is read stops the start before Kafka is even asked.
    path.write_text(f"projects:\n  - id: {project}\n    topics:\n      - name: fresh\n        colour: blue\n")
    said = f"pubsub-gateway: cannot start: --bootstrap-file {path}, line 5: a topic has no field 'colour'"
    for workers in ("1", "2"):  # with workers, the supervisor reads it first: said once
        done = _serve("--kafka-bootstrap", "127.0.0.1:1", "--workers", workers, "--bootstrap-file", str(path))
        assert done.returncode == 1, done.stderr
        assert done.stderr.count(said) == 1, done.stderr
        assert "Traceback" not in done.stderr, done.stderr
