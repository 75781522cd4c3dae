"""What schema validation costs per message: gateway.schemas validating ~1 KiB messages of each
schema type in each encoding, one thread, no Kafka.

    python -m benchmarks.schema_validation [--messages N] [--quick] [--out FILE]

Two records: an order (strings, an enum, a map, an array of records) and the publish scenario's
reading (a string, a long, 120 doubles, an optional string), the record whose publish rate with
a schema the `publish` scenario compares with a plain topic's.

For context each case also times what it cannot do with less: parsing the same bytes with the
library alone (fastavro's `schemaless_reader`, which the gateway does not use for validation,
see gateway/schemas/avro_binary.py; `json.loads`; protobuf's `ParseFromString` and
`json_format.Parse`). Compile times: an Avro definition, a Protocol Buffer definition (protoc in a
subprocess), and a cache hit. The best of `--repeats` runs is kept (the machine is shared).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import random
import subprocess
import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import fastavro
from google.protobuf import json_format

from benchmarks.scenarios import publish as publish_scenario
from gateway.schemas import AvroSchema, Encoding, ProtoSchema, SchemaCache, SchemaType, compile_schema

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "schema-validation.json"

AVRO = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "quantity", "type": "int"},
        {"name": "created", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "string"}},
        {
            "name": "lines",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Line",
                    "fields": [
                        {"name": "sku", "type": "string"},
                        {"name": "qty", "type": "int"},
                        {"name": "price", "type": "double"},
                    ],
                },
            },
        },
    ],
}

PROTO = """
syntax = "proto3";
package shop;
message Order {
  enum Status { NEW = 0; PAID = 1; SHIPPED = 2; }
  message Line { string sku = 1; int32 qty = 2; double price = 3; }
  string id = 1;
  string customer = 2;
  double amount = 3;
  int32 quantity = 4;
  int64 created = 5;
  Status status = 6;
  optional string note = 7;
  repeated string tags = 8;
  map<string, string> attrs = 9;
  repeated Line lines = 10;
}
"""


# The publish scenario's record (benchmarks/scenarios/publish.py): a string, a long, 120 doubles,
# an optional string; 1,016 bytes of Avro. The same as a Protocol Buffer message.
READING_PROTO = """
syntax = "proto3";
message Reading { string sensor = 1; int64 at = 2; repeated double values = 3; optional string note = 4; }
"""


def _reading() -> dict[str, Any]:
    return {
        "sensor": "s-17",
        "at": 1_700_000_000_000,
        "values": [i / 7 for i in range(120)],
        "note": "x" * 40,
    }


def _order(rng: random.Random) -> dict[str, Any]:
    """One order whose Avro binary is about 1 KiB."""
    return {
        "id": f"order-{rng.getrandbits(64):016x}",
        "customer": "customer-" + "".join(rng.choice("abcdefghij") for _ in range(40)),
        "amount": rng.uniform(1, 1000),
        "quantity": rng.randint(1, 50),
        "created": 1_700_000_000_000 + rng.randint(0, 10**9),
        "status": rng.choice(["NEW", "PAID", "SHIPPED"]),
        "note": "leave the parcel at the back door " * 3,
        "tags": [f"tag-{i}-{rng.randint(0, 999)}" for i in range(10)],
        "attrs": {f"key-{i}": f"value-{rng.getrandbits(32):08x}" for i in range(10)},
        "lines": [
            {"sku": f"sku-{rng.randint(0, 10**6):07d}", "qty": rng.randint(1, 9), "price": rng.uniform(1, 99)}
            for _ in range(16)
        ],
    }


def _avro_messages(schema: AvroSchema, orders: list[dict[str, Any]]) -> dict[Encoding, list[bytes]]:
    binary, as_json = [], []
    for order in orders:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, schema.parsed, order)
        binary.append(out.getvalue())
        text = io.StringIO()
        fastavro.json_writer(text, schema.parsed, [order])
        as_json.append(text.getvalue().strip().encode())
    return {Encoding.BINARY: binary, Encoding.JSON: as_json}


def _proto_messages(schema: ProtoSchema, orders: list[dict[str, Any]]) -> dict[Encoding, list[bytes]]:
    messages = [schema.message_class(**order) for order in orders]
    return {
        Encoding.BINARY: [m.SerializeToString() for m in messages],
        Encoding.JSON: [json_format.MessageToJson(m, indent=None).encode() for m in messages],
    }


def _rate(fn: Callable[[bytes], object], messages: list[bytes], total: int, repeats: int) -> float:
    """Messages per second, the best of `repeats` runs of `total` calls."""
    best = 0.0
    count = len(messages)
    for _ in range(repeats):
        started = time.perf_counter()
        for i in range(total):
            fn(messages[i % count])
        best = max(best, total / (time.perf_counter() - started))
    return best


def _case(
    name: str,
    validate: Callable[[bytes], object],
    reference: tuple[str, Callable[[bytes], object]],
    messages: list[bytes],
    total: int,
    repeats: int,
) -> dict[str, Any]:
    for message in messages:
        validate(message)  # every message is valid: a refusal here is a bug, not a figure
    rate = _rate(validate, messages, total, repeats)
    ref_name, ref = reference
    ref_rate = _rate(ref, messages, total, repeats)
    row = {
        "case": name,
        "mean_message_bytes": round(sum(map(len, messages)) / len(messages)),
        "validate_msgs_per_s": round(rate),
        "validate_us_per_msg": round(1e6 / rate, 2),
        "reference": ref_name,
        "reference_msgs_per_s": round(ref_rate),
        "validate_over_reference_time": round(ref_rate / rate, 2),
    }
    print(json.dumps(row), flush=True)
    return row


def _compile_ms(fn: Callable[[], object], runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return round(best * 1000, 3)


def _commit() -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return done.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000, help="validations per case and run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="500 messages, one run: a smoke test")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    total, repeats = (500, 1) if args.quick else (args.messages, args.repeats)

    avro_text = json.dumps(AVRO)
    avro = compile_schema(SchemaType.AVRO, avro_text)
    proto = compile_schema(SchemaType.PROTOCOL_BUFFER, PROTO)
    assert isinstance(avro, AvroSchema) and isinstance(proto, ProtoSchema)
    rng = random.Random(19)
    orders = [_order(rng) for _ in range(64)]
    avro_messages = _avro_messages(avro, orders)
    proto_messages = _proto_messages(proto, orders)

    def read_avro(data: bytes) -> object:
        return fastavro.schemaless_reader(io.BytesIO(data), avro.parsed)

    def parse_proto(data: bytes) -> object:
        return proto.message_class.FromString(data)

    def parse_proto_json(data: bytes) -> object:
        return json_format.Parse(data, proto.message_class())

    cases = [
        _case(
            "avro binary",
            lambda d: avro.validate(d, Encoding.BINARY),
            ("fastavro.schemaless_reader", read_avro),
            avro_messages[Encoding.BINARY],
            total,
            repeats,
        ),
        _case(
            "avro json",
            lambda d: avro.validate(d, Encoding.JSON),
            ("json.loads", json.loads),
            avro_messages[Encoding.JSON],
            total,
            repeats,
        ),
        _case(
            "protobuf binary",
            lambda d: proto.validate(d, Encoding.BINARY),
            ("Message.FromString", parse_proto),
            proto_messages[Encoding.BINARY],
            total,
            repeats,
        ),
        _case(
            "protobuf json",
            lambda d: proto.validate(d, Encoding.JSON),
            ("json_format.Parse", parse_proto_json),
            proto_messages[Encoding.JSON],
            total,
            repeats,
        ),
    ]
    reading_avro = compile_schema(SchemaType.AVRO, publish_scenario.AVRO_DEFINITION)
    reading_proto = compile_schema(SchemaType.PROTOCOL_BUFFER, READING_PROTO)
    assert isinstance(reading_avro, AvroSchema) and isinstance(reading_proto, ProtoSchema)
    reading = {
        "avro": _avro_messages(reading_avro, [_reading()]),
        "protobuf": _proto_messages(reading_proto, [_reading()]),
    }
    references: dict[tuple[str, Encoding], tuple[str, Callable[[bytes], object]]] = {
        ("avro", Encoding.BINARY): (
            "fastavro.schemaless_reader",
            lambda d: fastavro.schemaless_reader(io.BytesIO(d), reading_avro.parsed),
        ),
        ("avro", Encoding.JSON): ("json.loads", json.loads),
        ("protobuf", Encoding.BINARY): ("Message.FromString", reading_proto.message_class.FromString),
        ("protobuf", Encoding.JSON): (
            "json_format.Parse",
            lambda d: json_format.Parse(d, reading_proto.message_class()),
        ),
    }
    cases.extend(
        _case(
            f"{label} {encoding.name.lower()}, the publish scenario's record",
            lambda d, s=schema, e=encoding: s.validate(d, e),
            references[label, encoding],
            reading[label][encoding],
            total,
            repeats,
        )
        for label, schema in (("avro", reading_avro), ("protobuf", reading_proto))
        for encoding in (Encoding.BINARY, Encoding.JSON)
    )
    cache = SchemaCache()
    cache.get(SchemaType.AVRO, avro_text)
    compile_ms = {
        "avro": _compile_ms(lambda: compile_schema(SchemaType.AVRO, avro_text), 5),
        "protobuf (protoc subprocess)": _compile_ms(
            lambda: compile_schema(SchemaType.PROTOCOL_BUFFER, PROTO), 5
        ),
        "cache hit": _compile_ms(lambda: cache.get(SchemaType.AVRO, avro_text), 5),
    }
    print(json.dumps({"compile_ms": compile_ms}), flush=True)
    result = {
        "note": "python -m benchmarks.schema_validation: gateway.schemas validating ~1 KiB messages, "
        "one thread, best of the runs; reference = the library parsing the same bytes alone",
        "command": " ".join(
            ["python -m benchmarks.schema_validation", *(argv if argv is not None else sys.argv[1:])]
        ),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "commit": _commit(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "fastavro": version("fastavro"),
        "protobuf": version("protobuf"),
        "messages_per_run": total,
        "runs": repeats,
        "cases": cases,
        "compile_ms": compile_ms,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
