"""Resources declared at start (gateway/bootstrap, docs/bootstrap.md), applied to the suite's
broker: the doc's own example file, idempotence, updates, refusals naming their line with
nothing applied, deletions only when asked, and two processes applying one file at once."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
from gateway._pb.google.pubsub.v1 import schema_pb2
from gateway.bootstrap import Bootstrap, BootstrapError, Outcome, load
from gateway.server import Gateway
from tests.doc_examples import ROOT, blocks, example
from tests.inprocess.conftest import InProcessGateway, settings_for, wait_for

DOC = "docs/bootstrap.md"


def _project() -> str:
    return f"boot-{uuid.uuid4().hex[:8]}"


def _doc_file(project: str) -> str:
    """The doc's example file, its project renamed so that each test has its own."""
    text = example("docs/bootstrap.md", "bootstrap-file")
    assert "id: my-project" in text
    return text.replace("id: my-project", f"id: {project}")


def _write(tmp_path: Path, text: str, name: str = "bootstrap.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _apply(gw: InProcessGateway, path: Path | None, *short: str) -> Outcome:
    g = gw.gateway
    declared = load(path, short)
    return gw.run(Bootstrap(g.store, g.topics, g.subscriptions, g.schemas).apply(declared), timeout=120)


def _refused(gw: InProcessGateway, path: Path | None, *short: str) -> str:
    with pytest.raises(BootstrapError) as caught:
        _apply(gw, path, *short)
    return caught.value.message


def _sub(gw: InProcessGateway, name: str) -> pb.Subscription:
    return gw.gateway.store.require("subscription", name).proto


def _ops(gw: InProcessGateway, project: str) -> dict[str, str]:
    """Every stored record of the project and the op of its version: any write changes one."""
    store = gw.gateway.store
    out = {}
    for kind in ("schema", "topic", "subscription"):
        for name in store.names(kind, f"projects/{project}/"):
            res = store.get(kind, name)
            if res is not None:
                out[f"{kind}/{name}"] = res.op
    return out


def test_the_docs_example_file_is_applied_once_and_again_changes_nothing(
    gw: InProcessGateway, tmp_path: Path
) -> None:
    project = _project()
    path = _write(tmp_path, _doc_file(project))
    first = _apply(gw, path)
    assert first.counts == {"created": 7}, first  # 1 schema, 3 topics, 3 subscriptions (1 to delete: absent)
    p = f"projects/{project}"
    topic = gw.gateway.store.require("topic", f"{p}/topics/orders").proto
    assert topic.labels == {"team": "shop"} and topic.message_retention_duration.seconds == 86400
    assert topic.schema_settings.schema == f"{p}/schemas/order"
    assert topic.schema_settings.encoding == schema_pb2.JSON
    worker = _sub(gw, f"{p}/subscriptions/orders-worker")
    assert worker.topic == f"{p}/topics/orders" and worker.ack_deadline_seconds == 30
    assert worker.enable_message_ordering and worker.filter == 'attributes.region = "eu"'
    assert worker.dead_letter_policy.dead_letter_topic == f"{p}/topics/orders-dead-letter"
    assert worker.retry_policy.maximum_backoff.seconds == 60
    assert (
        _sub(gw, f"{p}/subscriptions/orders-push").push_config.push_endpoint == "http://app:8080/pubsub/push"
    )
    audit = _sub(gw, f"{p}/subscriptions/audit-all")
    assert audit.HasField("expiration_policy") and not audit.expiration_policy.HasField("ttl")  # never
    before = _ops(gw, project)
    again = _apply(gw, path)
    assert not again.counts and again.unchanged == 8, again
    assert _ops(gw, project) == before  # not one record written


def test_a_changed_setting_updates_and_what_the_file_leaves_out_stays(
    gw: InProcessGateway, tmp_path: Path
) -> None:
    project = _project()
    p = f"projects/{project}"
    text = f"""
projects:
  - id: {project}
    topics:
      - name: orders
    subscriptions:
      - name: worker
        topic: orders
        ackDeadlineSeconds: 30
        retryPolicy: {{minimumBackoff: 5s}}
"""
    _apply(gw, _write(tmp_path, text))
    # Someone changes a field the file does not name, through the API.
    change = pb.Subscription(name=f"{p}/subscriptions/worker", labels={"owner": "ops"})
    gw.run(gw.gateway.subscriptions.update(change, ["labels"]))
    changed = text.replace("ackDeadlineSeconds: 30", "ackDeadlineSeconds: 45").replace(
        "retryPolicy: {minimumBackoff: 5s}", "retryPolicy: null"
    )
    outcome = _apply(gw, _write(tmp_path, changed))
    assert outcome.counts == {"updated": 1}, outcome
    sub = _sub(gw, f"{p}/subscriptions/worker")
    assert sub.ack_deadline_seconds == 45
    assert not sub.HasField("retry_policy")  # null cleared it
    assert sub.labels == {"owner": "ops"}  # not named: left as it was


def test_a_setting_no_update_can_change_is_refused_naming_its_line(
    gw: InProcessGateway, tmp_path: Path
) -> None:
    project = _project()
    text = f"""
projects:
  - id: {project}
    topics:
      - name: orders
      - name: invoices
    subscriptions:
      - name: worker
        topic: orders
        enableMessageOrdering: false
"""
    _apply(gw, _write(tmp_path, text))
    moved = text.replace("topic: orders", "topic: invoices").replace(
        "- name: invoices", "- name: invoices\n      - name: fresh"
    )
    path = _write(tmp_path, moved)
    message = _refused(gw, path)
    assert message.startswith(
        f"--bootstrap-file {path}, line 10: subscription projects/{project}/subscriptions/worker: topic cannot change"
    )
    assert gw.gateway.store.get("topic", f"projects/{project}/topics/fresh") is None  # nothing applied
    ordered = _write(tmp_path, text.replace("enableMessageOrdering: false", "enableMessageOrdering: true"))
    message = _refused(gw, ordered)
    assert ", line 10: " in message and "enableMessageOrdering cannot change" in message, message


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("ackDeadlineSeconds: 5000", "ack_deadline"),
        ("ackDeadlines: 30", "has no field 'ackDeadlines'"),
        ("filter: 'attributes.x = '", "filter"),
        ("deadLetterPolicy: {deadLetterTopic: nowhere}", "topic {p}/topics/nowhere, which is not declared"),
        ("messageRetentionDuration: 1s", "message_retention_duration"),
        ("bigqueryConfig: {table: a.b.c}", "is not supported by this gateway"),
        ("state: ACTIVE", "set by the service"),
    ],
)
def test_a_bad_entry_stops_everything_and_names_its_line(
    gw: InProcessGateway, tmp_path: Path, entry: str, says: str
) -> None:
    project = _project()
    text = f"""projects:
  - id: {project}
    topics:
      - name: fresh
      - name: orders
    subscriptions:
      - name: worker
        topic: orders
        labels: {{team: shop}}
        {entry}
"""
    path = _write(tmp_path, text)
    message = _refused(gw, path)
    assert message.startswith(f"--bootstrap-file {path}, line 10: "), message
    assert says.format(p=f"projects/{project}") in message, message
    assert _ops(gw, project) == {}  # not even the topics before it


def test_a_subscription_on_a_topic_neither_declared_nor_stored_is_refused(
    gw: InProcessGateway, tmp_path: Path
) -> None:
    project = _project()
    path = _write(
        tmp_path,
        f"projects:\n  - id: {project}\n    subscriptions:\n      - name: worker\n        topic: ghost\n",
    )
    message = _refused(gw, path)
    assert f"line 5: it names the topic projects/{project}/topics/ghost, which is not declared" in message


def test_only_entries_that_say_delete_delete(gw: InProcessGateway, tmp_path: Path) -> None:
    project = _project()
    p = f"projects/{project}"
    _apply(gw, None, f"{project},orders:keep:drop,other:other-sub")
    # A file that leaves most of them out deletes none of them; `delete: true` deletes one.
    text = f"projects:\n  - id: {project}\n    subscriptions:\n      - name: drop\n        delete: true\n"
    outcome = _apply(gw, _write(tmp_path, text))
    assert outcome.counts == {"deleted": 1}, outcome
    store = gw.gateway.store
    assert store.get("subscription", f"{p}/subscriptions/drop") is None
    for kept in ("subscriptions/keep", "subscriptions/other-sub"):
        assert store.get("subscription", f"{p}/{kept}") is not None
    assert store.get("topic", f"{p}/topics/other") is not None
    assert not _apply(gw, _write(tmp_path, text)).counts  # gone already: nothing to do
    # A subscription naming a topic the same file deletes is refused.
    both = f"projects:\n  - id: {project}\n    topics:\n      - name: other\n        delete: true\n    subscriptions:\n      - name: other-sub\n        topic: other\n"
    assert "deleted at" in _refused(gw, _write(tmp_path, both))


def test_a_changed_definition_commits_one_revision(gw: InProcessGateway, tmp_path: Path) -> None:
    project = _project()
    name = f"projects/{project}/schemas/event"
    (tmp_path / "schemas").mkdir()
    avsc = tmp_path / "schemas" / "event.avsc"
    avsc.write_text('{"type": "record", "name": "Event", "fields": [{"name": "id", "type": "string"}]}')
    text = f"projects:\n  - id: {project}\n    schemas:\n      - name: event\n        type: AVRO\n        definitionFile: schemas/event.avsc\n"
    path = _write(tmp_path, text)
    _apply(gw, path)
    schemas = gw.gateway.schemas

    def revisions() -> int:
        return len(schemas.schema(name).meta.revisions)  # type: ignore[arg-type]

    assert revisions() == 1 and not _apply(gw, path).counts
    avsc.write_text(
        '{"type": "record", "name": "Event", "fields": [{"name": "id", "type": "string"},'
        ' {"name": "note", "type": "string", "default": ""}]}'
    )
    assert _apply(gw, path).counts == {"committed": 1}
    assert revisions() == 2 and not _apply(gw, path).counts
    # An incompatible one is refused, at the line of the definition, before anything is committed.
    avsc.write_text('{"type": "record", "name": "Event", "fields": [{"name": "id", "type": "long"}]}')
    assert ", line 6: " in _refused(gw, path) and revisions() == 2
    avsc.unlink()
    assert "line 6: cannot read definitionFile" in _refused(gw, path)


def test_the_quota_is_counted_with_what_the_file_makes(gw: InProcessGateway, tmp_path: Path) -> None:
    project = _project()
    settings = settings_for(
        gw.settings.kafka_bootstrap or "", gw.settings.internal_prefix, max_topics_per_project=2
    )
    small = InProcessGateway(settings).start()
    try:
        message = _refused(small, None, f"{project},one,two,three")
        assert "item 'three'" in message and "topics" in message, message
        assert _ops(small, project) == {}
    finally:
        small.stop()


def test_two_processes_applying_one_file_at_once_agree(gw: InProcessGateway, tmp_path: Path) -> None:
    other = InProcessGateway(
        settings_for(gw.settings.kafka_bootstrap or "", gw.settings.internal_prefix)
    ).start()
    try:
        project = _project()
        path = _write(tmp_path, _doc_file(project))
        declared = load(path, ())

        def applying(g: InProcessGateway) -> Any:
            gg = g.gateway
            run = Bootstrap(gg.store, gg.topics, gg.subscriptions, gg.schemas).apply(declared)
            return asyncio.run_coroutine_threadsafe(run, g.loop)

        a, b = applying(gw), applying(other)
        outcomes = [a.result(120), b.result(120)]
        wait_for("both processes hold the same", lambda: _ops(gw, project) == _ops(other, project))
        assert len(_ops(gw, project)) == 7
        assert sum(o.counts["created"] for o in outcomes) == 7, outcomes  # each made by one of them
        assert all(o.counts["created"] + o.unchanged == 8 for o in outcomes), outcomes
        assert len(gw.gateway.schemas.schema(f"projects/{project}/schemas/order").meta.revisions) == 1  # type: ignore[arg-type]
        assert not _apply(gw, path).counts  # and what they made is what the file says
    finally:
        other.stop()


def test_a_gateway_started_with_the_file_has_it_applied_before_it_is_ready(
    gw: InProcessGateway, tmp_path: Path
) -> None:
    project = _project()
    path = _write(tmp_path, _doc_file(project))
    settings = settings_for(
        gw.settings.kafka_bootstrap or "", gw.settings.internal_prefix, bootstrap_file=path
    )
    settings = dataclasses.replace(settings, bootstrap=(f"{project},events:events-worker",))
    fresh = InProcessGateway(settings).start()
    try:
        store = fresh.gateway.store
        assert store.get("subscription", f"projects/{project}/subscriptions/orders-worker") is not None
        assert store.get("subscription", f"projects/{project}/subscriptions/events-worker") is not None
    finally:
        fresh.stop()


def test_a_bad_file_stops_the_start_before_the_ports_listen(gw: InProcessGateway, tmp_path: Path) -> None:
    path = _write(
        tmp_path, "projects:\n  - id: shop\n    topics:\n      - name: orders\n        colour: blue\n"
    )
    gateway = Gateway(
        settings_for(gw.settings.kafka_bootstrap or "", gw.settings.internal_prefix, bootstrap_file=path)
    )
    with pytest.raises(BootstrapError, match=r"line 5: a topic has no field 'colour'"):
        gw.run(gateway.__aenter__())
    assert gateway.port == 0  # refused while reading: before Kafka, before any port


def test_the_docs_error_line_is_what_the_gateway_says(gw: InProcessGateway, tmp_path: Path) -> None:
    """docs/bootstrap.md shows the error of an ack deadline out of range in its example file."""
    shown = next(
        b for b in blocks(ROOT / DOC) if b.language == "text" and "cannot start" in b.text
    ).text.strip()
    line = int(re.search(r"line (\d+):", shown).group(1))  # type: ignore[union-attr]
    lines = example("docs/bootstrap.md", "bootstrap-file").splitlines()
    assert lines[line - 1].strip() == "ackDeadlineSeconds: 30"
    lines[line - 1] = lines[line - 1].replace("30", "5000")
    path = _write(tmp_path, "\n".join(lines) + "\n")
    message = _refused(gw, path)
    assert f"pubsub-gateway: cannot start: {message}" == shown.replace("bootstrap.yaml", str(path))
