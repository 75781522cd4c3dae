"""The same work against two source trees of the gateway, interleaved in one run, so that both
see the same machine: what a change costs on the hot path, as a ratio.

    python -m benchmarks.source_ab --base DIR [--new DIR] [--rounds 8] [--messages 10000]
        [--attributes 2] [--kafka-bootstrap HOST:PORT] [--out FILE]

DIR is a checkout (e.g. `git worktree add /tmp/base <commit>`); --new defaults to this one.
A gateway from each tree runs on one broker, each with a topic of 4 partitions and a
subscription whose runner is started (one message pulled and acked) before timing. Then, round
by round and tree by tree (the order alternating), `--messages` messages of 1 KiB, each with
`--attributes` attributes, are published through Publish (batches of 1,000, 4 calls in
flight): messages as applications send them; and then, round by round again, each tree's
subscription is drained of that many with Pull (max 1,000) + Acknowledge from one client.

This machine's speed moves by up to 2x from one second to the next, so the trees take turns
every few seconds rather than every few minutes. Gateway CPU (utime+stime from /proc) per
message and the rate are taken per turn; the figures are the median of the turns per tree;
ratios are new / base of those medians.
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


class Side:
    """One tree's gateway, its topic and its subscription."""

    def __init__(self, root: Path, bootstrap: str, log: Path, attributes: int) -> None:
        self.gw = Gateway(root, bootstrap, log)
        self.api = Api(self.gw.address)
        tag = uuid.uuid4().hex[:8]
        self.topic, self.sub = f"projects/ab/topics/t{tag}", f"projects/ab/subscriptions/s{tag}"
        self.api.create_topic(self.topic, partitions=PARTITIONS)
        self.api.create_subscription(self.sub, self.topic)
        self.api.publish_one(self.topic)
        self.api.take_one(self.sub)  # the runner is started and owns every partition
        self.request = pb.PublishRequest(topic=self.topic, messages=_messages(BATCH, attributes))

    def publish(self, messages: int) -> dict[str, float]:
        calls = messages // BATCH
        cpu0, t0 = self.gw.cpu_s(), time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(IN_FLIGHT) as pool:
            list(pool.map(lambda _: self.api.pub.Publish(self.request, timeout=60), range(calls)))
        seconds, cpu = time.perf_counter() - t0, self.gw.cpu_s() - cpu0
        n = calls * BATCH
        return {"publish_msgs_per_s": n / seconds, "publish_cpu_us_per_msg": cpu / n * 1e6}

    def drain(self, messages: int) -> dict[str, float]:
        got = 0
        cpu0, t0 = self.gw.cpu_s(), time.perf_counter()
        while got < messages:
            want = min(1000, messages - got)
            resp = self.api.sub.Pull(pb.PullRequest(subscription=self.sub, max_messages=want), timeout=30)
            ids = [m.ack_id for m in resp.received_messages]
            if ids:
                self.api.sub.Acknowledge(
                    pb.AcknowledgeRequest(subscription=self.sub, ack_ids=ids), timeout=30
                )
                got += len(ids)
            if time.perf_counter() - t0 > 300:
                raise TimeoutError(f"{got} of {messages} received in 300 s")
        seconds, cpu = time.perf_counter() - t0, self.gw.cpu_s() - cpu0
        return {"receive_msgs_per_s": got / seconds, "receive_cpu_us_per_msg": cpu / got * 1e6}

    def close(self) -> None:
        self.api.delete(self.topic, [self.sub])
        self.api.close()
        self.gw.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.source_ab", description=__doc__)
    parser.add_argument("--base", type=Path, required=True)
    parser.add_argument("--new", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--attributes", type=int, default=2)
    parser.add_argument("--kafka-bootstrap")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    trees = {"base": args.base.resolve(), "new": args.new.resolve()}
    runs: dict[str, list[dict[str, float]]] = {"base": [], "new": []}
    logs = Path(tempfile.mkdtemp(prefix="source-ab-"))
    started = time.time()
    with kafka_broker(args.kafka_bootstrap) as (bootstrap, _, kafka_version):
        sides: dict[str, Side] = {}
        try:
            for side in runs:
                sides[side] = Side(trees[side], bootstrap, logs / f"{side}.log", args.attributes)
            turns: dict[str, list[dict[str, float]]] = {"base": [], "new": []}
            for phase in ("publish", "drain"):
                for rnd in range(args.rounds):
                    for side in ("base", "new") if rnd % 2 == 0 else ("new", "base"):
                        done = getattr(sides[side], phase)(args.messages)
                        if phase == "publish":
                            turns[side].append(done)
                        else:
                            turns[side][rnd].update(done)
                        print(
                            f"{phase} {rnd} {side}: " + ", ".join(f"{k} {v:.1f}" for k, v in done.items()),
                            flush=True,
                        )
            runs = turns
        finally:
            for opened in sides.values():
                opened.close()
    medians = {side: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for side, rs in runs.items()}
    ratios = {k: medians["new"][k] / medians["base"][k] for k in medians["new"]}
    result: dict[str, Any] = {
        "command": _command(argv if argv is not None else sys.argv[1:], trees),
        "machine": procstats.describe_machine(kafka_version),
        "seconds": round(time.time() - started, 1),
        "trees": {side: {"commit": _commit(p)} for side, p in trees.items()},
        "source": {"commit": f"{_commit(trees['base'])} vs {_commit(trees['new'])}"},
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


def _command(argv: list[str], trees: dict[str, Path]) -> str:
    """The command line, each checkout named by its commit (no path of this machine)."""
    named = {str(p): f"<checkout of {_commit(p)}>" for p in trees.values()}
    args = [named.get(str(Path(a).resolve()), a) if not a.startswith("-") else a for a in argv]
    return "python -m benchmarks.source_ab " + " ".join(args)


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
