"""The admin commands' pure parts: publish batches, message lines, resource names."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from gateway import admin_context, admin_messages
from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
from gateway.admin_output import _line


def test_publish_batches_hold_at_most_1000_messages_and_9_mib() -> None:
    sizes = [len(b) for b in admin_messages.batches(iter([b"x"] * 2500))]
    assert sizes == [1000, 1000, 500]
    big = b"y" * (4 * 1024 * 1024)
    assert [len(b) for b in admin_messages.batches(iter([big, big, big, b"z"]))] == [2, 2]
    assert list(admin_messages.batches(iter([]))) == []


def test_a_message_line_quotes_text_and_base64s_the_rest() -> None:
    m = pb.ReceivedMessage(
        ack_id="a",
        delivery_attempt=2,
        message=pb.PubsubMessage(
            data=b"two\nlines", message_id="7", ordering_key="k", attributes={"b": "2", "a": "1"}
        ),
    )
    m.message.publish_time.FromSeconds(0)
    assert _line(m) == '7  1970-01-01T00:00:00Z  "two\\nlines"  key="k"  a="1"  b="2"  attempt=2'
    m.message.data = b"\xff"
    assert _line(m).split("  ")[2] == "base64:/w=="


def test_short_names_take_the_project(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PUBSUB_PROJECT_ID", raising=False)
    ctx = admin_context.Context.__new__(admin_context.Context)
    ctx.args = argparse.Namespace(project=None)
    assert ctx.name("projects/p/topics/t", "topics") == "projects/p/topics/t"
    with pytest.raises(admin_context.UsageError, match="--project"):
        ctx.name("t", "topics")
    monkeypatch.setenv("PUBSUB_PROJECT_ID", "env")
    assert ctx.name("t", "topics") == "projects/env/topics/t"
    ctx.args.project = "flag"
    assert ctx.name("s", "subscriptions") == "projects/flag/subscriptions/s"


def test_registering_the_commands_imports_neither_grpc_nor_rich() -> None:
    """`pubsub-gateway serve` pays nothing for the admin commands."""
    code = "import sys, gateway.admin_cli; print(sorted(m for m in ('grpc', 'rich') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_gclouds_durations() -> None:
    assert [admin_context.seconds(v, "--x") for v in ("600", "600s", "10m", "1h30m", "7d", "2D")] == [
        600,
        600,
        600,
        5400,
        604800,
        172800,
    ]
    for bad in ("", "1y", "10 m", "m10", "1.5h", "-3s"):
        with pytest.raises(admin_context.UsageError, match="takes a duration"):
            admin_context.seconds(bad, "--x")


def test_pairs_split_on_commas_where_gcloud_does() -> None:
    assert admin_context.pairs(["a=1,b=2", "c=x=y"], "--labels", commas=True) == {
        "a": "1",
        "b": "2",
        "c": "x=y",
    }
    assert admin_context.pairs(["k=v,w"], "-a") == {"k": "v,w"}  # publish -a keeps its value whole
    with pytest.raises(admin_context.UsageError, match="KEY=VALUE"):
        admin_context.pairs(["novalue"], "--labels", commas=True)
