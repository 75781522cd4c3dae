"""A run's shared state: the broker address, the gateways, and a pool of load-generator processes
(spawned, so they share nothing with this one) that start each measurement at one instant."""

from __future__ import annotations

import multiprocessing
import multiprocessing.pool
import os
import time
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.processes import GatewayProc
from benchmarks.sampling import Samples, Window

GenResult = dict[str, Any]
Task = tuple[Callable[[dict[str, Any]], GenResult], Mapping[str, Any]]


def _init_worker(counter: Any) -> None:
    """Pool initializer: the shared counter, and the imports, before anything is measured."""
    import confluent_kafka  # noqa: F401
    import grpc  # noqa: F401

    from benchmarks.gen import common, latency, publish, subscribe  # noqa: F401

    common.init_shared(counter)


def _call(fn: Callable[[dict[str, Any]], GenResult], args: dict[str, Any]) -> GenResult:
    """Run a generator; its failure comes back as a RuntimeError with the traceback (Kafka's
    exceptions do not pickle)."""
    try:
        return fn(args)
    except Exception:
        raise RuntimeError(f"{fn.__name__} failed:\n{traceback.format_exc()}") from None


def _settle(_: int) -> int:
    time.sleep(0.5)  # long enough that every pool process takes one
    return 0


DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def drop_page_cache() -> bool:
    """Free the kernel's clean page cache, when this process may (root); True if it did."""
    try:
        DROP_CACHES.write_text("1\n")
    except OSError:
        return False
    return True


class Bench:
    """Shared state of one benchmark run: the broker, the gateways, the generator pool."""

    def __init__(
        self,
        bootstrap: str,
        kafka_pid: int | None,
        log_dir: Path,
        workers: int,
        gateway_args: Sequence[str] = (),
        empty_cache: bool = True,
    ) -> None:
        """`empty_cache` False: runs that ask for an empty page cache (`run`) do not get one."""
        self.bootstrap = bootstrap
        self.gateway_args = list(gateway_args)
        self.kafka_pid = kafka_pid
        self.log_dir = log_dir
        self.uid = uuid.uuid4().hex[:8]
        self.prefix = f"bench{self.uid}"
        self.gateways: list[GatewayProc] = []
        self.workers = workers
        self.empty_cache = empty_cache
        # Runs that asked to start on an empty page cache: emptied, refused (not root), or kept
        # (--keep-page-cache).
        self.cache_drops = {"done": 0, "refused": 0, "kept": 0}
        ctx = multiprocessing.get_context("spawn")
        self.counter = ctx.Value("q", 0)  # generators of one run count what they received here
        self.pool: multiprocessing.pool.Pool = ctx.Pool(
            workers, initializer=_init_worker, initargs=(self.counter,)
        )
        self.pool.map(_settle, range(workers), chunksize=1)

    def start_gateway(self) -> GatewayProc:
        n = len(self.gateways) + 1
        gw = GatewayProc(self.bootstrap, self.prefix, self.log_dir / f"gateway-{n}.log", *self.gateway_args)
        self.gateways.append(gw)
        return gw

    def stop_gateway(self, gw: GatewayProc) -> None:
        gw.stop()
        self.gateways.remove(gw)

    @property
    def gateway(self) -> GatewayProc:
        return self.gateways[0]

    def name(self, collection: str, label: str) -> str:
        return f"projects/bench/{collection}/{label}-{self.uid}"

    def window(self, gateways: list[GatewayProc] | None = None) -> Window:
        return Window([p for g in (gateways or self.gateways[:1]) for p in g.pids], self.kafka_pid)

    def run(
        self,
        tasks: Sequence[Task],
        lead: float = 0.6,
        timeout: float = 600.0,
        gateways: list[GatewayProc] | None = None,
        fresh_cache: bool = False,
    ) -> tuple[list[GenResult], Samples]:
        """Run tasks in the pool, all starting at one instant; measure the window they run in.

        `fresh_cache`: start on an empty page cache too, for runs that only write. On this
        machine a page cache holding a raw producer's gigabytes made the gateway's Publish that
        followed ~25% slower, at ~40% more CPU per message, the broker slower too; emptied, both
        were as fast as on a fresh machine (docs/benchmarks.md). Reads are left alone: a consumer
        case reads what was just written from the cache, as consumers do."""
        if len(tasks) > self.workers:
            raise ValueError(f"{len(tasks)} tasks for {self.workers} generator processes")
        self.counter.value = 0
        # What earlier runs wrote is still going to disk (a raw producer's 8 s are ~2.5 GB): a
        # run that starts while the kernel writes that back pays for it. Each starts clean.
        os.sync()
        if fresh_cache and not self.empty_cache:
            self.cache_drops["kept"] += 1
        elif fresh_cache:
            self.cache_drops["done" if drop_page_cache() else "refused"] += 1
        start_at = time.time() + lead
        pending = [self.pool.apply_async(_call, (fn, {**args, "start_at": start_at})) for fn, args in tasks]
        time.sleep(max(0.0, start_at - time.time()))
        window = self.window(gateways)
        results = [p.get(timeout) for p in pending]
        return results, window.close()

    def close(self) -> None:
        for gw in list(self.gateways):
            self.stop_gateway(gw)
        self.pool.terminate()
        self.pool.join()
