"""The admin commands of `pubsub-gateway` (gateway/admin_cli.py), run as users run them: a
subprocess against a gateway subprocess, its output and exit status read back."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import GatewayFactory
from tests.e2e.pki import Pki
from tests.gateways import GatewayProcess

pytestmark = pytest.mark.integration


def cli(
    gw: GatewayProcess | None, *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`pubsub-gateway ARGS` pointed at `gw` through PUBSUB_EMULATOR_HOST, as users point it."""
    environ = {k: v for k, v in os.environ.items() if k not in ("PUBSUB_EMULATOR_HOST", "PUBSUB_PROJECT_ID")}
    if gw is not None:
        environ["PUBSUB_EMULATOR_HOST"] = gw.address
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
        check=False,
    )


def ok(gw: GatewayProcess, *args: str, stdin: str | None = None) -> str:
    done = cli(gw, *args, stdin=stdin)
    assert done.returncode == 0, done.stderr
    return done.stdout


def as_json(gw: GatewayProcess, *args: str, stdin: str | None = None) -> Any:
    return json.loads(ok(gw, *args, "--format", "json", stdin=stdin))


def pulled(gw: GatewayProcess, *args: str) -> list[Any]:
    """pull's --format json: one JSON object per message and line."""
    return [json.loads(line) for line in ok(gw, *args, "--format", "json").splitlines()]


def test_topics_and_subscriptions_are_created_listed_described_and_deleted(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    topic, dead, subscription = names("topics"), names("topics", "-dead"), names("subscriptions")
    assert (
        ok(shared_gateway, "topics", "create", topic, "--partitions", "2", "--label", "team=a")
        == f"created {topic}\n"
    )
    created = as_json(shared_gateway, "topics", "create", dead)
    assert created["name"] == dead
    assert topic in ok(shared_gateway, "topics", "list", "--project", "test-project").splitlines()
    described = as_json(shared_gateway, "topics", "describe", topic)
    assert described["labels"] == {"kafka-partitions": "2", "team": "a"}
    assert ok(shared_gateway, "topics", "describe", topic).splitlines()[0] == f"name: {topic}"

    short = subscription.rsplit("/", 1)[1]  # a short name takes its project from --project
    sub = as_json(
        shared_gateway, "subscriptions", "create", short, "--project", "test-project", "--topic", topic,
        "--ack-deadline", "30", "--ordering", "--filter", 'attributes.k = "v"',
        "--dead-letter-topic", dead, "--max-delivery-attempts", "5",
    )  # fmt: skip
    assert sub["name"] == subscription
    assert sub["ackDeadlineSeconds"] == 30
    assert sub["enableMessageOrdering"] is True
    assert sub["filter"] == 'attributes.k = "v"'
    assert sub["deadLetterPolicy"] == {"deadLetterTopic": dead, "maxDeliveryAttempts": 5}
    assert as_json(shared_gateway, "subscriptions", "describe", subscription) == sub
    listed = as_json(shared_gateway, "subscriptions", "list", "--topic", topic)
    assert [s["name"] for s in listed] == [subscription]
    assert subscription in ok(shared_gateway, "subscriptions", "list", "--project", "test-project")

    assert ok(shared_gateway, "subscriptions", "delete", subscription) == f"deleted {subscription}\n"
    assert as_json(shared_gateway, "topics", "delete", topic) == {"name": topic, "deleted": True}
    ok(shared_gateway, "topics", "delete", dead)
    assert as_json(shared_gateway, "subscriptions", "list", "--topic", topic) == []
    assert topic not in ok(shared_gateway, "topics", "list", "--project", "test-project")


def test_publish_arguments_with_attributes_and_key_then_pull_and_ack(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    topic, subscription = names("topics"), names("subscriptions")
    ok(shared_gateway, "topics", "create", topic)
    ok(shared_gateway, "subscriptions", "create", subscription, "--topic", topic, "--ordering")
    published = as_json(
        shared_gateway, "publish", topic, "héllo", "world", "-a", "k=v", "-a", "x=1=2", "--ordering-key", "o"
    )
    assert published["topic"] == topic and len(published["messageIds"]) == 2

    got = pulled(shared_gateway, "pull", subscription, "--all", "--ack")
    assert [base64.b64decode(m["message"]["data"]).decode() for m in got] == ["héllo", "world"]
    assert [m["message"]["messageId"] for m in got] == published["messageIds"]
    assert all(m["message"]["attributes"] == {"k": "v", "x": "1=2"} for m in got)
    assert all(m["message"]["orderingKey"] == "o" for m in got)

    ids = ok(shared_gateway, "publish", topic, "plain").split()
    assert len(ids) == 1
    lines = ok(shared_gateway, "pull", subscription, "--all", "--ack").splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{ids[0]}  ")
    assert '"plain"' in lines[0]
    assert pulled(shared_gateway, "pull", subscription, "--ack") == []  # all acknowledged


def test_bulk_publish_from_stdin_and_a_drain_show_progress(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    topic, subscription = names("topics"), names("subscriptions")
    ok(shared_gateway, "topics", "create", topic)
    ok(shared_gateway, "subscriptions", "create", subscription, "--topic", topic)
    lines = [f"line {i}" for i in range(2500)]
    done = cli(
        shared_gateway, "publish", topic, "--progress", "--format", "json", stdin="\n".join(lines) + "\n\n"
    )
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["messageIds"]) == 2500  # three requests; the empty line skipped
    assert "2500 messages" in done.stderr  # the bar, on stderr only

    done = cli(shared_gateway, "pull", subscription, "--all", "--ack", "--progress")
    assert done.returncode == 0, done.stderr
    got = [json.loads(line.split("  ")[2]) for line in done.stdout.splitlines()]
    assert sorted(got) == sorted(lines)
    assert "2500 messages" in done.stderr
    done = cli(shared_gateway, "pull", subscription, "--max", "5")
    assert (done.returncode, done.stdout) == (0, "")
    assert "no messages" in done.stderr


def test_nack_releases_what_was_pulled(shared_gateway: GatewayProcess, names: Callable[[str], str]) -> None:
    topic, subscription = names("topics"), names("subscriptions")
    ok(shared_gateway, "topics", "create", topic)
    ok(shared_gateway, "subscriptions", "create", subscription, "--topic", topic, "--ack-deadline", "600")
    ok(shared_gateway, "publish", topic, "again")
    first = pulled(shared_gateway, "pull", subscription, "--all", "--nack")
    second = pulled(shared_gateway, "pull", subscription, "--all", "--ack")  # not held for 600 s
    assert [m["message"]["data"] for m in first] == [m["message"]["data"] for m in second]
    assert first[0]["ackId"] != second[0]["ackId"]


def test_seek_to_a_snapshot_and_to_a_time(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    topic, subscription, snapshot = names("topics"), names("subscriptions"), names("snapshots")
    ok(shared_gateway, "topics", "create", topic)
    ok(shared_gateway, "subscriptions", "create", subscription, "--topic", topic)
    ok(shared_gateway, "publish", topic, stdin="a\nb\nc\n")
    snap = as_json(shared_gateway, "snapshots", "create", snapshot, "--subscription", subscription)
    assert snap["name"] == snapshot and snap["topic"] == topic
    assert snapshot in ok(shared_gateway, "snapshots", "list", "--project", "test-project").split()
    assert as_json(shared_gateway, "snapshots", "describe", snapshot)["topic"] == topic
    assert len(pulled(shared_gateway, "pull", subscription, "--all", "--ack")) == 3

    assert (
        ok(shared_gateway, "seek", subscription, "--snapshot", snapshot)
        == f"{subscription} sought to {snapshot}\n"
    )
    assert len(pulled(shared_gateway, "pull", subscription, "--all", "--ack")) == 3
    sought = as_json(shared_gateway, "seek", subscription, "--time", "2020-01-01T00:00:00")
    assert sought == {"subscription": subscription, "target": "2020-01-01T00:00:00+00:00"}
    assert len(pulled(shared_gateway, "pull", subscription, "--all", "--ack")) == 3

    assert ok(shared_gateway, "snapshots", "delete", snapshot) == f"deleted {snapshot}\n"
    assert snapshot not in ok(shared_gateway, "snapshots", "list", "--project", "test-project")


def test_refused_calls_print_the_status_and_exit_non_zero(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    topic = names("topics")
    done = cli(shared_gateway, "topics", "describe", topic)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("pubsub-gateway: NOT_FOUND: ")

    done = cli(shared_gateway, "topics", "describe", topic, "--format", "json")
    error = json.loads(done.stderr)["error"]
    assert (done.returncode, error["code"], error["status"]) == (1, 5, "NOT_FOUND")
    assert topic in error["message"]

    ok(shared_gateway, "topics", "create", topic)
    done = cli(shared_gateway, "topics", "create", topic)
    assert done.returncode == 1 and "ALREADY_EXISTS" in done.stderr
    done = cli(shared_gateway, "topics", "create", "projects/test-project/topics/1-bad")
    assert done.returncode == 1 and "INVALID_ARGUMENT" in done.stderr
    done = cli(shared_gateway, "seek", names("subscriptions"), "--time", "2020-01-01")
    assert done.returncode == 1 and "NOT_FOUND" in done.stderr


def test_usage_errors_exit_2_without_a_call(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    done = cli(None, "topics", "list", "--project", "p")
    assert done.returncode == 2 and "PUBSUB_EMULATOR_HOST" in done.stderr
    done = cli(shared_gateway, "topics", "describe", "short-name")
    assert done.returncode == 2 and "--project" in done.stderr
    done = cli(shared_gateway, "publish", names("topics"), "m", "-a", "no-equals")
    assert done.returncode == 2 and "KEY=VALUE" in done.stderr
    done = cli(shared_gateway, "seek", names("subscriptions"), "--time", "yesterday")
    assert done.returncode == 2 and "ISO 8601" in done.stderr
    done = cli(shared_gateway, "pull", names("subscriptions"), "--ack", "--nack")
    assert done.returncode == 2  # argparse: not allowed together


def test_an_unreachable_gateway_is_unavailable() -> None:
    with socket.socket() as s:  # a port nobody listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = cli(None, "topics", "list", "--project", "p", "--address", f"127.0.0.1:{port}", "--timeout", "5")
    assert done.returncode == 1
    assert done.stderr.startswith("pubsub-gateway: UNAVAILABLE: ")


def test_a_token_file_authenticates_the_commands(start_gateway: GatewayFactory, tmp_path: Path) -> None:
    (tmp_path / "tokens").write_text("admin-token user:ops@example.com\nviewer-token user:dev@example.com\n")
    policy = {"projects/test-project": {"bindings": [
        {"role": "roles/pubsub.admin", "members": ["user:ops@example.com"]},
        {"role": "roles/pubsub.viewer", "members": ["user:dev@example.com"]},
    ]}}  # fmt: skip
    (tmp_path / "iam.json").write_text(json.dumps(policy))
    gw = start_gateway(
        "--auth-token-file", str(tmp_path / "tokens"), "--iam-policy-file", str(tmp_path / "iam.json")
    )
    (tmp_path / "admin").write_text("admin-token\n")
    (tmp_path / "viewer").write_text("viewer-token")
    topic = "projects/test-project/topics/authenticated"

    done = cli(gw, "topics", "create", topic)
    assert done.returncode == 1 and done.stderr.startswith("pubsub-gateway: UNAUTHENTICATED: ")
    assert ok(gw, "topics", "create", topic, "--token-file", str(tmp_path / "admin")) == f"created {topic}\n"
    assert (
        ok(gw, "topics", "list", "--project", "test-project", "--token-file", str(tmp_path / "viewer"))
        == f"{topic}\n"
    )
    done = cli(gw, "topics", "delete", topic, "--token-file", str(tmp_path / "viewer"))
    assert done.returncode == 1 and "PERMISSION_DENIED" in done.stderr
    done = cli(gw, "topics", "list", "--project", "p", "--token-file", str(tmp_path / "missing"))
    assert done.returncode == 2 and "cannot read" in done.stderr


def test_tls_ca_file_connects_over_tls(start_gateway: GatewayFactory, tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    gw = start_gateway(*pki.flags())
    topic = "projects/test-project/topics/over-tls"
    assert ok(gw, "topics", "create", topic, "--tls-ca-file", str(pki.ca_file)) == f"created {topic}\n"
    done = cli(gw, "topics", "describe", topic, "--timeout", "5")  # plain text to a TLS port
    assert done.returncode == 1 and done.stderr.startswith("pubsub-gateway: UNAVAILABLE: ")


def test_gclouds_command_lines_work_with_gcloud_pubsub_replaced(
    shared_gateway: GatewayProcess, names: Callable[[str], str], tmp_path: Path
) -> None:
    """gcloud's commands and flag names, as a gcloud user types them."""
    gw = shared_gateway
    topic, subscription, other = names("topics"), names("subscriptions"), names("subscriptions", "-2")
    ok(gw, "topics", "create", topic, "--labels", "team=a,tier=b")
    assert as_json(gw, "topics", "describe", topic)["labels"] == {"team": "a", "tier": "b"}
    ok(
        gw,
        "subscriptions",
        "create",
        subscription,
        "--topic",
        topic,
        "--enable-message-ordering",
        "--message-filter",
        "attributes:k",
        "--labels",
        "team=a",
        "--message-retention-duration",
        "1h30m",
        "--retain-acked-messages",
        "--expiration-period",
        "2d",
        "--min-retry-delay",
        "10s",
        "--max-retry-delay",
        "5m",
        "--ack-deadline",
        "30",
    )
    described = as_json(gw, "subscriptions", "describe", subscription)
    assert described["enableMessageOrdering"] is True and described["filter"] == "attributes:k"
    assert described["messageRetentionDuration"] == "5400s" and described["retainAckedMessages"] is True
    assert described["expirationPolicy"] == {"ttl": "172800s"}
    assert described["retryPolicy"] == {"minimumBackoff": "10s", "maximumBackoff": "300s"}
    assert described["labels"] == {"team": "a"} and described["ackDeadlineSeconds"] == 30
    ok(gw, "subscriptions", "create", other, "--topic", topic, "--expiration-period", "never")
    assert as_json(gw, "subscriptions", "describe", other).get("expirationPolicy") == {}
    assert sorted(as_json(gw, "topics", "list-subscriptions", topic)) == sorted([subscription, other])

    # topics publish: data as text, from a file (bytes as they are), from base64, from stdin whole
    binary = bytes(range(256)) + b"\n\nline two\n"
    (tmp_path / "data.bin").write_bytes(binary)
    ok(gw, "topics", "publish", topic, "--message", "hello", "--attribute", "k=v,n=1", "--ordering-key", "o")
    ok(gw, "topics", "publish", topic, "--message-file", str(tmp_path / "data.bin"), "--attribute", "k=file")
    ok(
        gw,
        "topics",
        "publish",
        topic,
        "--message-base64",
        base64.b64encode(b"\x00\xff").decode(),
        "--attribute",
        "k=b",
    )
    ok(gw, "topics", "publish", topic, "--message-file", "-", "--attribute", "k=stdin", stdin="a\n\nb\n")
    got = pulled(gw, "subscriptions", "pull", subscription, "--all", "--auto-ack")
    datas = {m["message"]["attributes"]["k"]: base64.b64decode(m["message"]["data"]) for m in got}
    assert datas == {"v": b"hello", "file": binary, "b": b"\x00\xff", "stdin": b"a\n\nb\n"}
    first = next(m["message"] for m in got if m["message"]["attributes"]["k"] == "v")
    assert first["attributes"] == {"k": "v", "n": "1"} and first["orderingKey"] == "o"
    assert pulled(gw, "subscriptions", "pull", subscription, "--limit", "10") == []  # all acked

    # pull without --auto-ack (gcloud's --limit defaults to 1), then ack and modack by id
    ok(gw, "topics", "publish", topic, "--message", "x", "--attribute", "k=x")
    ok(gw, "topics", "publish", topic, "--message", "y", "--attribute", "k=y")
    one = pulled(gw, "subscriptions", "pull", subscription)
    assert len(one) == 1
    ok(
        gw,
        "subscriptions",
        "modify-message-ack-deadline",
        subscription,
        "--ack-ids",
        one[0]["ackId"],
        "--ack-deadline",
        "0",
    )
    both: list[Any] = []
    for _ in range(20):  # a Pull answers with what is ready at once: both come within a few
        both += pulled(gw, "subscriptions", "pull", subscription, "--limit", "5")
        if len(both) >= 2:
            break
    assert sorted(m["message"]["attributes"]["k"] for m in both) == ["x", "y"]
    done = as_json(gw, "subscriptions", "ack", subscription, "--ack-ids", ",".join(m["ackId"] for m in both))
    assert len(done["ackIds"]) == 2
    assert pulled(gw, "subscriptions", "pull", subscription, "--limit", "5") == []

    # seek, push config, detach
    ok(gw, "subscriptions", "seek", subscription, "--time", "2020-01-01T00:00:00Z")
    assert len(pulled(gw, "subscriptions", "pull", subscription, "--all", "--auto-ack")) == 6
    ok(
        gw,
        "subscriptions",
        "modify-push-config",
        other,
        "--push-endpoint",
        "http://127.0.0.1:9/p",
        "--push-no-wrapper",
    )
    push = as_json(gw, "subscriptions", "describe", other)["pushConfig"]
    assert push["pushEndpoint"] == "http://127.0.0.1:9/p" and "noWrapper" in push
    ok(
        gw,
        "subscriptions",
        "update",
        other,
        "--push-endpoint",
        "http://127.0.0.1:9/q",
        "--push-auth-service-account",
        "pusher@p.iam.gserviceaccount.com",
        "--push-auth-token-audience",
        "aud",
    )
    push = as_json(gw, "subscriptions", "describe", other)["pushConfig"]
    assert push["oidcToken"] == {"serviceAccountEmail": "pusher@p.iam.gserviceaccount.com", "audience": "aud"}
    assert cli(gw, "subscriptions", "update", other, "--push-auth-token-audience", "a").returncode == 2
    ok(gw, "subscriptions", "modify-push-config", other, "--push-endpoint", "")
    assert "pushConfig" not in as_json(gw, "subscriptions", "describe", other) or not as_json(
        gw, "subscriptions", "describe", other
    )["pushConfig"].get("pushEndpoint")
    assert as_json(gw, "topics", "detach-subscription", other) == {"subscription": other, "detached": True}
    assert as_json(gw, "subscriptions", "describe", other)["detached"] is True

    # refusals: bad durations and flags are usage errors (2), a refused call is 1
    for bad in (
        (
            "subscriptions",
            "create",
            names("subscriptions", "-3"),
            "--topic",
            topic,
            "--message-retention-duration",
            "1y",
        ),
        ("subscriptions", "create", names("subscriptions", "-4"), "--topic", topic, "--push-no-wrapper"),
        ("topics", "publish", topic),
        ("topics", "publish", topic, "--message-base64", "%%%"),
    ):
        done = cli(gw, *bad)
        assert done.returncode == 2 and done.stderr.startswith("pubsub-gateway "), (bad, done.stderr)
    done = cli(gw, "subscriptions", "ack", subscription, "--ack-ids", "nonsense")
    assert done.returncode == 1 and "INVALID_ARGUMENT" in done.stderr, done.stderr


AVRO = json.dumps({"type": "record", "name": "R", "fields": [{"name": "n", "type": "int"}]})
AVRO_2 = json.dumps(
    {
        "type": "record",
        "name": "R",
        "fields": [{"name": "n", "type": "int"}, {"name": "s", "type": ["null", "string"], "default": None}],
    }
)


def test_the_schemas_group_as_gclouds(
    shared_gateway: GatewayProcess, names: Callable[[str], str], tmp_path: Path
) -> None:
    gw = shared_gateway
    schema = names("schemas")
    (tmp_path / "r.avsc").write_text(AVRO_2)
    made = as_json(gw, "schemas", "create", schema, "--type", "avro", "--definition", AVRO)
    assert made["name"] == schema and made["type"] == "AVRO"
    assert schema in ok(gw, "schemas", "list", "--project", "test-project").split()
    committed = as_json(
        gw, "schemas", "commit", schema, "--type", "avro", "--definition-file", str(tmp_path / "r.avsc")
    )
    assert committed["revisionId"] != made["revisionId"]
    revisions = as_json(gw, "schemas", "list-revisions", schema)
    assert [r["revisionId"] for r in revisions] == [committed["revisionId"], made["revisionId"]]
    assert len(ok(gw, "schemas", "list-revisions", schema).splitlines()) == 2
    rolled = as_json(gw, "schemas", "rollback", schema, "--revision-id", made["revisionId"])
    assert rolled["definition"] == AVRO
    ok(gw, "schemas", "delete-revision", f"{schema}@{committed['revisionId']}")
    assert committed["revisionId"] not in {
        r["revisionId"] for r in as_json(gw, "schemas", "list-revisions", schema)
    }
    assert as_json(gw, "schemas", "describe", schema)["definition"] == AVRO

    assert as_json(
        gw, "schemas", "validate-schema", "--type", "avro", "--definition", AVRO, "--project", "test-project"
    ) == {"valid": True}
    bad = cli(
        gw, "schemas", "validate-schema", "--type", "avro", "--definition", "{", "--project", "test-project"
    )
    assert bad.returncode == 1 and "INVALID_ARGUMENT" in bad.stderr, bad.stderr
    good = (
        "schemas",
        "validate-message",
        "--message-encoding",
        "json",
        "--schema-name",
        schema,
        "--project",
        "test-project",
    )
    assert as_json(gw, *good, "--message", '{"n": 1}') == {"valid": True}
    refused = cli(
        gw,
        *good[:-4],
        "--message",
        '{"n": "x"}',
        "--type",
        "avro",
        "--definition",
        AVRO,
        "--project",
        "test-project",
    )
    assert refused.returncode == 1 and "INVALID_ARGUMENT" in refused.stderr, refused.stderr
    assert cli(gw, "schemas", "delete-revision", schema).returncode == 2  # no @REVISION

    topic = names("topics")
    made_topic = as_json(
        gw,
        "topics",
        "create",
        topic,
        "--schema",
        schema,
        "--message-encoding",
        "json",
        "--message-retention-duration",
        "1d",
    )
    assert (
        made_topic["schemaSettings"]["schema"] == schema
        and made_topic["messageRetentionDuration"] == "86400s"
    )
    assert ok(gw, "topics", "publish", topic, "--message", '{"n": 2}').strip()
    refused = cli(gw, "topics", "publish", topic, "--message", '{"n": "two"}')
    assert refused.returncode == 1 and "INVALID_ARGUMENT" in refused.stderr, refused.stderr
    assert cli(gw, "topics", "create", names("topics", "-x"), "--message-encoding", "json").returncode == 2
    ok(gw, "topics", "delete", topic)
    assert ok(gw, "schemas", "delete", schema) == f"deleted {schema}\n"


def test_iam_commands_on_topics_subscriptions_snapshots_and_schemas(
    shared_gateway: GatewayProcess, names: Callable[[str], str], tmp_path: Path
) -> None:
    gw = shared_gateway
    topic, subscription = names("topics"), names("subscriptions")
    ok(gw, "topics", "create", topic)
    ok(gw, "subscriptions", "create", subscription, "--topic", topic)
    for command, name in (("topics", topic), ("subscriptions", subscription)):
        role = "roles/pubsub.viewer"
        added = as_json(
            gw, command, "add-iam-policy-binding", name, "--member", "user:ana@example.com", "--role", role
        )
        assert {"role": role, "members": ["user:ana@example.com"]} in added["bindings"]
        again = as_json(
            gw, command, "add-iam-policy-binding", name, "--member", "user:bo@example.com", "--role", role
        )
        assert next(b for b in again["bindings"] if b["role"] == role)["members"] == [
            "user:ana@example.com",
            "user:bo@example.com",
        ]
        assert as_json(gw, command, "get-iam-policy", name)["bindings"] == again["bindings"]
        ok(gw, command, "remove-iam-policy-binding", name, "--member", "user:ana@example.com", "--role", role)
        left = as_json(gw, command, "get-iam-policy", name)
        assert next(b for b in left["bindings"] if b["role"] == role)["members"] == ["user:bo@example.com"]
        missing = cli(
            gw, command, "remove-iam-policy-binding", name, "--member", "user:zed@example.com", "--role", role
        )
        assert missing.returncode == 2 and "has no binding" in missing.stderr
        policy = tmp_path / f"{command}.json"
        policy.write_text(
            json.dumps({"bindings": [{"role": "roles/pubsub.editor", "members": ["group:g@example.com"]}]})
        )
        assert as_json(gw, command, "set-iam-policy", name, str(policy))["bindings"] == [
            {"role": "roles/pubsub.editor", "members": ["group:g@example.com"]}
        ]
    snapshot = names("snapshots")
    ok(gw, "snapshots", "create", snapshot, "--subscription", subscription)
    assert as_json(gw, "snapshots", "get-iam-policy", snapshot).get("bindings", []) == []
    (tmp_path / "bad.json").write_text("{")
    assert cli(gw, "topics", "set-iam-policy", topic, str(tmp_path / "bad.json")).returncode == 2


def test_topics_and_subscriptions_update_as_gclouds(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    gw = shared_gateway
    topic, dead, subscription = names("topics"), names("topics", "-dead"), names("subscriptions")
    ok(gw, "topics", "create", topic, "--labels", "a=1,b=2")
    ok(gw, "topics", "create", dead)
    changed = as_json(
        gw,
        "topics",
        "update",
        topic,
        "--update-labels",
        "c=3",
        "--remove-labels",
        "a",
        "--message-retention-duration",
        "2h",
    )
    assert changed["labels"] == {"b": "2", "c": "3"} and changed["messageRetentionDuration"] == "7200s"
    cleared = as_json(gw, "topics", "update", topic, "--clear-labels", "--clear-message-retention-duration")
    assert not cleared.get("labels") and "messageRetentionDuration" not in cleared

    ok(gw, "subscriptions", "create", subscription, "--topic", topic, "--labels", "x=1")
    changed = as_json(
        gw,
        "subscriptions",
        "update",
        subscription,
        "--ack-deadline",
        "45",
        "--update-labels",
        "y=2",
        "--retain-acked-messages",
        "--message-retention-duration",
        "1d",
        "--expiration-period",
        "3d",
        "--dead-letter-topic",
        dead,
        "--max-delivery-attempts",
        "7",
        "--min-retry-delay",
        "5s",
        "--max-retry-delay",
        "1m",
    )
    assert changed["ackDeadlineSeconds"] == 45 and changed["labels"] == {"x": "1", "y": "2"}
    assert changed["retainAckedMessages"] is True and changed["messageRetentionDuration"] == "86400s"
    assert changed["expirationPolicy"] == {"ttl": "259200s"}
    assert changed["deadLetterPolicy"] == {"deadLetterTopic": dead, "maxDeliveryAttempts": 7}
    assert changed["retryPolicy"] == {"minimumBackoff": "5s", "maximumBackoff": "60s"}
    back = as_json(
        gw,
        "subscriptions",
        "update",
        subscription,
        "--no-retain-acked-messages",
        "--clear-dead-letter-policy",
        "--clear-retry-policy",
    )
    assert (
        not back.get("retainAckedMessages") and "deadLetterPolicy" not in back and "retryPolicy" not in back
    )
    assert as_json(gw, "subscriptions", "describe", subscription)["ackDeadlineSeconds"] == 45
    for nothing in (("topics", "update", topic), ("subscriptions", "update", subscription)):
        done = cli(gw, *nothing)
        assert done.returncode == 2 and "nothing to update" in done.stderr
    refused = cli(gw, "subscriptions", "update", subscription, "--ack-deadline", "5000")
    assert refused.returncode == 1 and "INVALID_ARGUMENT" in refused.stderr, refused.stderr


def test_gcloud_flags_for_other_projects_and_for_what_the_gateway_refuses(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    gw = shared_gateway
    topic = names("topics")  # projects/test-project/topics/...
    short = topic.rsplit("/", 1)[1]
    made = as_json(
        gw,
        "topics",
        "create",
        topic,
        "--message-storage-policy-allowed-regions",
        "europe-west1,us-east1",
        "--topic-encryption-key",
        "k",
    )
    assert made["messageStoragePolicy"]["allowedPersistenceRegions"] == ["europe-west1", "us-east1"]
    subscription = "projects/other-project/subscriptions/" + short
    created = as_json(
        gw,
        "subscriptions",
        "create",
        subscription,
        "--topic",
        short,
        "--topic-project",
        "test-project",
        "--dead-letter-topic",
        short,
        "--dead-letter-topic-project",
        "test-project",
    )
    assert created["topic"] == topic and created["deadLetterPolicy"]["deadLetterTopic"] == topic
    for flag, value in (("--bigquery-table", "p:d.t"), ("--cloud-storage-bucket", "b")):
        done = cli(gw, "subscriptions", "create", names("subscriptions", flag), "--topic", topic, flag, value)
        assert done.returncode == 1 and "UNIMPLEMENTED" in done.stderr, done.stderr
    for command, name in (("snapshots", names("snapshots")), ("schemas", names("schemas"))):
        if command == "snapshots":
            ok(gw, "snapshots", "create", name, "--subscription", subscription)
        else:
            ok(gw, "schemas", "create", name, "--type", "avro", "--definition", AVRO)
        bound = as_json(
            gw,
            command,
            "add-iam-policy-binding",
            name,
            "--member",
            "user:ana@example.com",
            "--role",
            "roles/pubsub.viewer",
        )
        assert bound["bindings"] == [{"role": "roles/pubsub.viewer", "members": ["user:ana@example.com"]}]
        ok(
            gw,
            command,
            "remove-iam-policy-binding",
            name,
            "--member",
            "user:ana@example.com",
            "--role",
            "roles/pubsub.viewer",
        )
        assert not as_json(gw, command, "get-iam-policy", name).get("bindings")
