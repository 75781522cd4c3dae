"""Where a message's attributes cost the gateway CPU, stage by stage, in one process (no broker):
nanoseconds per message with 0, 2 and 5 attributes, and per attribute.

    python -m benchmarks.attributes [--messages 1000] [--repeat 7] [--out FILE]

Publish (as a Publish of 1,000 messages reaches the gateway):
  parse        PublishRequest decoded by the protobuf runtime (what gRPC does before the handler)
  admit        the handler's OutgoingMessage per message (limits.outgoing_of), limits.check_publish
  to_record    records.to_record: attributes to Kafka headers
  produce      confluent-kafka's Producer.produce of the record, headers included (queued only)
Delivery (a Pull response of 1,000 messages):
  record       records.record, as the consumer builds one per fetched record (sizes worked out)
  encode       wire/received.encode: the ReceivedMessages' bytes
  runtime      the same message through the protobuf runtime (records.to_message and a
               PubsubMessage serialized): what encode did for any record with headers before
  rest         the REST form of the response (the JSON REST answers a Pull with)

Each figure is the least of --repeat timings of a loop over --messages messages, the cells timed
in interleaved rounds (this machine's speed varies by up to 2x from second to second: the least
is the cost without interference), with the gateway's garbage-collector settings
(gateway/serving.py). Attributes are as applications set
them: short names, values of ~20 ASCII characters.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka

from benchmarks import procstats
from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
from gateway.core.runner import Delivery
from gateway.serving import GC_THRESHOLDS
from gateway.translate import limits, records
from gateway.wire import received, rest_json

COUNTS = (0, 2, 5)
PAYLOAD = b"x" * 1024


def _attributes(n: int) -> dict[str, str]:
    return {f"attr{k}": f"value-{k}-{uuid.uuid4().hex[:12]}" for k in range(n)}


Stage = Callable[[], object]


def publish_stages(n: int, messages: int) -> dict[str, Stage]:
    attrs = _attributes(n)
    request = pb.PublishRequest(
        topic="projects/p/topics/t", messages=[pb.PubsubMessage(data=PAYLOAD, attributes=attrs)] * messages
    )
    wire = request.SerializeToString()
    parsed = pb.PublishRequest.FromString(wire)
    outgoing = limits.outgoing_of(parsed.messages)
    out = [records.to_record(m.data, m.attributes, m.ordering_key, m.numeric) for m in outgoing]
    # Never connects (a closed port): produce only queues, as it does before a batch goes out.
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": "127.0.0.1:9", "queue.buffering.max.messages": 10_000_000, "log_level": 0}
    )

    def produce() -> None:
        for key, value, headers in out:
            producer.produce("t", value, key, partition=0, headers=headers)
        producer.purge()

    return {
        "parse": lambda: pb.PublishRequest.FromString(wire),
        "admit": lambda: limits.check_publish(limits.outgoing_of(parsed.messages)),
        "to_record": lambda: [
            records.to_record(m.data, m.attributes, m.ordering_key, m.numeric) for m in outgoing
        ],
        "produce": produce,
    }


def delivery_stages(n: int, messages: int) -> dict[str, Stage]:
    headers = [(k, v.encode()) for k, v in _attributes(n).items()] or None
    now = int(time.time() * 1000)
    made = [records.record(0, o, now, None, PAYLOAD, headers) for o in range(messages)]
    ack = "projects-p-subscriptions-s-u1-0-123456789-1" * 2
    deliveries = [Delivery(ack, r, 0) for r in made]
    response = received.Encoded(pb.PullResponse(), received.encode(deliveries))
    return {
        "record": lambda: [records.record(0, o, now, None, PAYLOAD, headers) for o in range(messages)],
        "encode": lambda: received.encode(deliveries),
        "runtime": lambda: [received._general(r, None) for r in made],
        "rest": lambda: rest_json.render(response.message(), rest_json.Output()),
    }


def measure(messages: int, repeat: int) -> dict[str, dict[str, dict[str, float]]]:
    """side -> attribute count -> stage -> ns per message (the least of `repeat` rounds)."""
    stages = {
        "publish": {str(n): publish_stages(n, messages) for n in COUNTS},
        "delivery": {str(n): delivery_stages(n, messages) for n in COUNTS},
    }
    best: dict[str, dict[str, dict[str, float]]] = {
        side: {n: {stage: float("inf") for stage in fns} for n, fns in rows.items()}
        for side, rows in stages.items()
    }
    for _ in range(repeat + 1):  # the first round warms up and is timed like the others
        for side, rows in stages.items():
            for n, fns in rows.items():
                for stage, fn in fns.items():
                    t0 = time.perf_counter_ns()
                    fn()
                    ns = (time.perf_counter_ns() - t0) / messages
                    best[side][n][stage] = min(best[side][n][stage], ns)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.attributes", description=__doc__)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    table = measure(args.messages, args.repeat)
    per_attribute = {
        side: {stage: (rows[str(COUNTS[-1])][stage] - rows["0"][stage]) / COUNTS[-1] for stage in rows["0"]}
        for side, rows in table.items()
    }
    result: dict[str, Any] = {
        "command": "python -m benchmarks.attributes " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": procstats.describe_machine("none (no broker)"),
        "source": procstats.source_version(),
        "ns_per_message": table,
        "ns_per_attribute": per_attribute,
    }
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    for side, rows in table.items():
        print(side)
        for stage in rows["0"]:
            cells = "  ".join(f"{rows[str(n)][stage]:8.0f}" for n in COUNTS)
            print(f"  {stage:10s} {cells}   per attribute {per_attribute[side][stage]:6.0f} ns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
