"""publish: raw acks=all idempotent producer vs the gateway's Publish with batches of 1, 100, 1000;
and raw Kafka in the batch=1000 case's pattern, to tell the gateway's cost from the pattern's."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from typing import Any

import fastavro
import grpc

from benchmarks.config import Mode, PublishCase
from benchmarks.gen import publish
from benchmarks.harness import Bench
from benchmarks.results import GenResult, Row, build, ratio
from benchmarks.scenarios.common import api_for, kafka_topic

NAME = "publish"
TARGET_BATCH = 1000  # issue 22's ratio target is for Publish with batches of 1000


def run(bench: Bench, mode: Mode) -> list[Row]:
    topic = bench.name("topics", "publish")
    with api_for(bench.gateway) as api:
        api.create_topic(topic)
        try:
            return _measure(bench, mode, topic)
        finally:
            api.delete(topic, [])


def _measure(bench: Bench, mode: Mode, topic: str) -> list[Row]:
    raw_args = {"bootstrap": bench.bootstrap, "topic": kafka_topic(topic), "seconds": mode.publish_seconds}
    results, win = bench.run([(publish.raw_produce, raw_args)], fresh_cache=True)
    raw = build(NAME, "raw producer, 1 process", "raw", results, win)
    rows = [raw]
    pattern = _pattern(bench, mode, topic, raw)
    rows += [pattern] if pattern else []
    for case in mode.publish_cases:
        args = _args(case, mode, address=bench.gateway.address, topic=topic)
        label = f"Publish batch={case.batch}, {case.procs} proc x {case.window} in flight"
        row = _row(bench, label, "gateway", publish.gw_publish, args, case.procs, raw)
        row.extra["rpcs_per_s"] = round(row.msgs_per_s / case.batch)
        if pattern and case.batch == TARGET_BATCH:
            row.extra["vs_raw_same_pattern"] = ratio(row.msgs_per_s, pattern.msgs_per_s)
        rows.append(row)
    rows += _rest(bench, mode, topic, raw, rows)
    rows += _schema(bench, mode, topic, raw)
    return rows


def _pattern(bench: Bench, mode: Mode, topic: str, raw: Row) -> Row | None:
    """Raw Kafka with the batch=1000 case's pattern (runs of 1000 to one partition, as many in
    flight): what the broker allows at that concurrency, beside what the raw producer allows
    unbounded. The gateway's row then says how much of each it reaches."""
    case = next((c for c in mode.publish_cases if c.batch == TARGET_BATCH), None)
    if case is None:
        return None
    args = _args(case, mode, bootstrap=bench.bootstrap, topic=kafka_topic(topic))
    label = f"raw runs of {case.batch}, {case.procs} proc x {case.window} in flight"
    return _row(bench, label, "raw", publish.raw_runs, args, case.procs, raw)


def _args(case: PublishCase, mode: Mode, **where: str) -> dict[str, Any]:
    return {**where, "batch": case.batch, "window": case.window, "seconds": mode.publish_seconds}


def _row(
    bench: Bench,
    label: str,
    kind: str,
    gen: Callable[[dict[str, Any]], GenResult],
    args: dict[str, Any],
    procs: int,
    raw: Row,
) -> Row:
    """One case: `procs` processes of `gen`, its ratio to the raw producer, and its errors."""
    results, win = bench.run([(gen, args)] * procs, fresh_cache=True)
    row = build(NAME, label, kind, results, win)
    row.ratio = ratio(row.msgs_per_s, raw.msgs_per_s)
    errors = sum(int(r.get("errors", 0)) for r in results)
    if errors:
        row.extra["errors"] = errors
    return row


# An Avro record of ~1 KiB: what a topic with a schema validates on every publish.
AVRO_DEFINITION = json.dumps(
    {
        "type": "record",
        "name": "Reading",
        "fields": [
            {"name": "sensor", "type": "string"},
            {"name": "at", "type": "long"},
            {"name": "values", "type": {"type": "array", "items": "double"}},
            {"name": "note", "type": ["null", "string"], "default": None},
        ],
    }
)


def _avro_message() -> bytes:
    out = io.BytesIO()
    record = {
        "sensor": "s-17",
        "at": 1_700_000_000_000,
        "values": [i / 7 for i in range(120)],
        "note": "x" * 40,
    }
    fastavro.schemaless_writer(out, fastavro.parse_schema(json.loads(AVRO_DEFINITION)), record)
    return out.getvalue()


def _schema(bench: Bench, mode: Mode, plain_topic: str, raw: Row) -> list[Row]:
    """Publish batch=100 of one ~1 KiB Avro message to a topic with an Avro schema (every message
    validated, the googclient_* attributes added) and to the plain topic, alternating plain,
    schema, plain: `vs_plain_same_run` is against the mean of the two plain runs (the ratio, as
    every row's, against the raw producer); the plain runs' rates and gateway CPU per message are
    in `extra` too."""
    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
    from gateway._pb.google.pubsub.v1 import schema_pb2 as spb
    from gateway._pb.google.pubsub.v1 import schema_pb2_grpc as spb_grpc

    case = next((c for c in mode.publish_cases if c.batch == 100), None)
    if case is None:
        return []
    data = _avro_message()
    project = plain_topic.split("/")[1]
    schema_id = bench.name("schemas", "publish").rsplit("/", 1)[1]
    topic = bench.name("topics", "publish-schema")
    with api_for(bench.gateway) as api:
        schemas = spb_grpc.SchemaServiceStub(api.channel)
        created = schemas.CreateSchema(
            spb.CreateSchemaRequest(
                parent=f"projects/{project}",
                schema_id=schema_id,
                schema=spb.Schema(type=spb.Schema.AVRO, definition=AVRO_DEFINITION),
            ),
            timeout=60,
        )
        settings = pb.SchemaSettings(schema=created.name, encoding=spb.Encoding.BINARY)
        api.pub.CreateTopic(pb.Topic(name=topic, schema_settings=settings), timeout=60)
        try:
            runs: dict[str, list[Row]] = {"plain": [], "schema": []}
            for kind, target in (("plain", plain_topic), ("schema", topic), ("plain", plain_topic)):
                args = {
                    "address": bench.gateway.address,
                    "topic": target,
                    "batch": case.batch,
                    "window": case.window,
                    "seconds": mode.publish_seconds,
                    "data": data,
                }
                results, win = bench.run([(publish.gw_publish, args)] * case.procs, fresh_cache=True)
                label = f"Publish batch={case.batch} of {len(data)} B Avro, {kind} topic"
                runs[kind].append(build(NAME, label, "gateway", results, win))
        finally:
            api.delete(topic, [])
            with contextlib.suppress(grpc.RpcError):
                schemas.DeleteSchema(spb.DeleteSchemaRequest(name=created.name), timeout=30)
    plain = sum(r.msgs_per_s for r in runs["plain"]) / len(runs["plain"])
    row = runs["schema"][0]
    row.ratio = ratio(row.msgs_per_s, raw.msgs_per_s)
    row.extra["vs_plain_same_run"] = round(row.msgs_per_s / plain, 3) if plain else 0
    row.extra["plain_msgs_per_s"] = [round(r.msgs_per_s) for r in runs["plain"]]
    # Gateway CPU per message of the plain runs, next to this row's own gw_cpu_us_per_msg.
    row.extra["plain_gw_cpu_us_per_msg"] = [r.extra.get("gw_cpu_us_per_msg") for r in runs["plain"]]
    return [row]


def _rest(bench: Bench, mode: Mode, topic: str, raw: Row, rows: list[Row]) -> list[Row]:
    """REST publish of 100 x 1 KiB per request, next to gRPC with the same batch in this run."""
    if not bench.gateway.rest_address:
        return []
    grpc_row = next((r for r in rows if r.case.startswith("Publish batch=100,")), None)
    procs = next((c.procs for c in mode.publish_cases if c.batch == 100), 2)
    args = {
        "rest_address": bench.gateway.rest_address,
        "topic": topic,
        "batch": 100,
        "window": 2,
        "seconds": mode.publish_seconds,
    }
    label = f"REST publish batch=100, {procs} proc x 2 in flight"
    row = _row(bench, label, "gateway", publish.rest_publish, args, procs, raw)
    if grpc_row is not None:
        row.extra["vs_grpc_batch_100"] = round(row.msgs_per_s / grpc_row.msgs_per_s, 3)
    return [row]
