"""The same work against two source trees of the gateway, in alternating rounds of one run, so
that both see the same machine: what a change costs on the hot path, as a ratio.

    python -m benchmarks.source_ab --base DIR [--new DIR] [--rounds 3] [--messages 30000]
        [--attributes 2] [--kafka-bootstrap HOST:PORT] [--out FILE]

DIR is a checkout (e.g. `git worktree add /tmp/base <commit>`); --new defaults to this one.
Each round starts a gateway from each tree in turn (the order alternates), on one broker, and:

1. creates a topic of 4 partitions and a subscription, and starts the subscription's runner
   (one message pulled and acked) before timing;
2. publishes `--messages` messages of 1 KiB, each with `--attributes` attributes, through
   Publish (batches of 1,000, 4 calls in flight): messages as applications send them;
3. drains them with Pull (max 1,000) + Acknowledge from one client.

Gateway CPU (utime+stime from /proc) per message is taken for each phase. The figures are the
median of the rounds per tree; ratios are new / base of those medians.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks import procstats
from benchmarks.api import Api
from benchmarks.processes import _read_ready, kafka_broker
from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb

PARTITIONS = 4
BATCH = 1000
IN_FLIGHT = 4
PAYLOAD = 1024


class Gateway:
    """`python -m gateway serve` from the source tree `root` (first on PYTHONPATH)."""

    def __init__(self, root: Path, bootstrap: str, log: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(root)}
        cmd = [sys.executable, "-m", "gateway", "serve", "--port", "0", "--rest-port", "0"]
        cmd += ["--kafka-bootstrap", bootstrap, "--internal-prefix", f"ab{uuid.uuid4().hex[:6]}"]
        cmd += ["--log-level", "WARNING"]
        with log.open("wb") as err:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=env, cwd=root)
        found: list[str] = []
        assert self.proc.stdout is not None
        threading.Thread(target=_read_ready, args=(self.proc.stdout, found), daemon=True).start()
        deadline = time.monotonic() + 120
        while not found:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"gateway from {root} did not start: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        self.address = found[0]

    def cpu_s(self) -> float:
        sample = procstats.proc_sample(self.proc.pid)
        assert sample is not None, "the gateway died"
        return sample.cpu_s

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def _messages(n: int, attributes: int) -> list[pb.PubsubMessage]:
    data = os.urandom(PAYLOAD // 2).hex().encode()
    attrs = {f"attribute-{k}": f"value-{k}-{uuid.uuid4().hex[:8]}" for k in range(attributes)}
    return [pb.PubsubMessage(data=data, attributes=attrs) for _ in range(n)]


def one_round(gw: Gateway, messages: int, attributes: int) -> dict[str, float]:
    api = Api(gw.address)
    tag = uuid.uuid4().hex[:8]
    topic, sub = f"projects/ab/topics/t{tag}", f"projects/ab/subscriptions/s{tag}"
    try:
        api.create_topic(topic, partitions=PARTITIONS)
        api.create_subscription(sub, topic)
        api.publish_one(topic)
        api.take_one(sub)  # the runner is started and owns every partition before timing
        batch = _messages(BATCH, attributes)
        request = pb.PublishRequest(topic=topic, messages=batch)
        calls = messages // BATCH
        cpu0, t0 = gw.cpu_s(), time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(IN_FLIGHT) as pool:
            list(pool.map(lambda _: api.pub.Publish(request, timeout=60), range(calls)))
        publish_s, publish_cpu = time.perf_counter() - t0, gw.cpu_s() - cpu0
        published = calls * BATCH
        got = 0
        cpu0, t0 = gw.cpu_s(), time.perf_counter()
        while got < published:
            resp = api.sub.Pull(pb.PullRequest(subscription=sub, max_messages=1000), timeout=30)
            ids = [m.ack_id for m in resp.received_messages]
            if ids:
                api.sub.Acknowledge(pb.AcknowledgeRequest(subscription=sub, ack_ids=ids), timeout=30)
                got += len(ids)
            if time.perf_counter() - t0 > 300:
                raise TimeoutError(f"{got} of {published} received in 300 s")
        receive_s, receive_cpu = time.perf_counter() - t0, gw.cpu_s() - cpu0
        return {
            "publish_msgs_per_s": published / publish_s,
            "publish_cpu_us_per_msg": publish_cpu / published * 1e6,
            "receive_msgs_per_s": got / receive_s,
            "receive_cpu_us_per_msg": receive_cpu / got * 1e6,
        }
    finally:
        api.delete(topic, [sub])
        api.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.source_ab", description=__doc__)
    parser.add_argument("--base", type=Path, required=True)
    parser.add_argument("--new", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=30_000)
    parser.add_argument("--attributes", type=int, default=2)
    parser.add_argument("--kafka-bootstrap")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    trees = {"base": args.base.resolve(), "new": args.new.resolve()}
    runs: dict[str, list[dict[str, float]]] = {"base": [], "new": []}
    logs = Path(tempfile.mkdtemp(prefix="source-ab-"))
    started = time.time()
    with kafka_broker(args.kafka_bootstrap) as (bootstrap, _, kafka_version):
        for rnd in range(args.rounds):
            order = ["base", "new"] if rnd % 2 == 0 else ["new", "base"]
            for side in order:
                gw = Gateway(trees[side], bootstrap, logs / f"{side}-{rnd}.log")
                try:
                    figures = one_round(gw, args.messages, args.attributes)
                finally:
                    gw.stop()
                runs[side].append(figures)
                print(
                    f"round {rnd} {side}: " + ", ".join(f"{k} {v:.1f}" for k, v in figures.items()),
                    flush=True,
                )
    medians = {side: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for side, rs in runs.items()}
    ratios = {k: medians["new"][k] / medians["base"][k] for k in medians["new"]}
    result: dict[str, Any] = {
        "command": "python -m benchmarks.source_ab " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": procstats.describe_machine(kafka_version),
        "seconds": round(time.time() - started, 1),
        "trees": {side: {"path": str(p), "commit": _commit(p)} for side, p in trees.items()},
        "messages": args.messages,
        "attributes": args.attributes,
        "rounds": runs,
        "medians": medians,
        "ratios_new_over_base": ratios,
    }
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(json.dumps({"medians": medians, "ratios_new_over_base": ratios}, indent=2))
    return 0


def _commit(root: Path) -> str:
    out = subprocess.run(
        ["git", "-C", str(root), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() or "unknown"


if __name__ == "__main__":
    sys.exit(main())
