"""python -m benchmarks.gen.official ARGS_JSON: google-cloud-pubsub's `SubscriberClient.subscribe`
with default flow control, acking in the callback, until `expected` messages arrived (or
`deadline_s` passed). Prints the generator result as one JSON line."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

from benchmarks.gen.common import result, wait_until


def receive(args: dict[str, Any]) -> dict[str, Any]:
    os.environ["PUBSUB_EMULATOR_HOST"] = args["address"]
    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    expected = args["expected"]
    lock = threading.Lock()
    done = threading.Event()
    count, last = [0], [0.0]

    def on_message(message: Any) -> None:
        message.ack()
        with lock:
            count[0] += 1
            last[0] = time.time()
            if count[0] >= expected:
                done.set()

    wait_until(args["start_at"])
    cpu0, t0 = time.process_time(), time.time()
    future = subscriber.subscribe(args["subscription"], on_message)
    done.wait(args["deadline_s"])
    future.cancel()
    future.result(timeout=30)
    subscriber.close()
    return result(count[0], t0, last[0] or t0, cpu0)


if __name__ == "__main__":
    print(json.dumps(receive(json.loads(sys.argv[1]))))
