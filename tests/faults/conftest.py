"""The fault suite's rig: gateways that can be cut off, the load process, and the history.

Each gateway runs under a group id of its own and on a port fixed for the test, so that one
restarted comes back where its clients look for it. The load runs as a process of its own, under
a group id too (tests/faults/load.py). What the test itself does (a cut, a kill) goes into the
history beside what the clients saw, and `verdict()` checks the whole.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from gateway.kafka import jvm
from tests.faults import history, netcut
from tests.faults.load import Config, Sub
from tests.gateways import GatewayProcess

REPO = Path(__file__).resolve().parents[2]


class FaultGateway(GatewayProcess):
    gid: int
    port: int


class LoadRun:
    def __init__(self, proc: subprocess.Popen[bytes], config: Config, log: Path) -> None:
        self.proc, self.config, self.log = proc, config, log

    def wait(self, timeout: float) -> None:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"the load did not finish; log:\n{self.log.read_text()[-4000:]}") from None
        assert code == 0, f"the load failed ({code}); log:\n{self.log.read_text()[-4000:]}"


# Where each test's verdict goes as well, when set (make test-faults: benchmarks/results/faults).
RESULTS = os.environ.get("FAULT_RESULTS")


class Rig:
    def __init__(self, bootstrap: str, log_dir: Path, work: Path, name: str = "") -> None:
        self.bootstrap, self.log_dir, self.work = bootstrap, log_dir, work
        self.name = name
        self.groups = netcut.Groups(os.environ.get("PYTEST_XDIST_WORKER", ""))
        self.cuts = netcut.Cuts()
        self.record = history.Recorder(work / "test-events.jsonl")
        self.gateways: list[FaultGateway] = []
        self.loads: list[LoadRun] = []
        self.prefix = f"f{uuid.uuid4().hex[:8]}"  # the gateways of one test serve the same resources
        self._written = False

    @property
    def broker_ports(self) -> list[int]:
        return [int(address.rsplit(":", 1)[1]) for address in self.bootstrap.split(",")]

    def gateway(self, *extra: str) -> FaultGateway:
        gid = self.groups.take()
        (port,) = jvm.free_ports(1)
        gw = FaultGateway(
            self.bootstrap,
            self.prefix,
            self.log_dir,
            "--port",
            str(port),
            *extra,
            wrap=netcut.Groups.wrap(gid),
        )
        gw.gid, gw.port = gid, port
        self.gateways.append(gw)
        return gw.start()

    def load(self, topic: str, subscriptions: list[Sub], publish_via: str, **settings: Any) -> LoadRun:
        n = len(self.loads)
        config = Config(
            topic=topic,
            subscriptions=subscriptions,
            publish_via=publish_via,
            history=str(self.work / f"load-{n}.jsonl"),
            **settings,
        )
        path = self.work / f"load-{n}.json"
        path.write_text(json.dumps(asdict(config)))
        log = self.log_dir / f"load-{self.prefix}-{n}.log"
        gid = self.groups.take()
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [*netcut.Groups.wrap(gid), sys.executable, "-m", "tests.faults.load", str(path)],
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )
        run = LoadRun(proc, config, log)
        run.gid = gid  # type: ignore[attr-defined]
        self.loads.append(run)
        return run

    @contextmanager
    def cut(
        self, what: str, pairs: Iterable[tuple[int, Iterable[int]]], *, must_drop: bool = True
    ) -> Iterator[None]:
        """Drop the packets of each (group, ports) pair while the block runs; the history holds
        when the cut started and ended, and how many packets it dropped. `must_drop`: a cut
        that dropped nothing fails the test (it did not take: the traffic went another way)."""
        pairs = [(gid, list(ports)) for gid, ports in pairs]
        self.record("fault", what=what, phase="start")
        with self.cuts.cutting(pairs):
            yield
        self.record("fault", what=what, phase="end", dropped=self.cuts.dropped)
        self.result(packets_dropped=self.cuts.dropped)
        assert self.cuts.dropped > 0 or not must_drop, f"the cut ({what}) dropped no packet"

    def mark(self, what: str, phase: str) -> None:
        self.record("fault", what=what, phase=phase)

    def events(self) -> list[history.Event]:
        self.record.close()
        self.record = history.Recorder(self.work / "test-events.jsonl")
        return history.read(self.work / "test-events.jsonl", *(Path(r.config.history) for r in self.loads))

    def verdict(self, subscriptions: Iterable[Sub], ordered: Iterable[str] = ()) -> history.Verdict:
        subs = list(subscriptions)
        verdict = history.check(
            self.events(),
            [s.name for s in subs],
            exactly_once=[s.name for s in subs if s.exactly_once],
            ordered=ordered,
        )
        (self.work / "verdict.json").write_text(json.dumps(verdict.summary(), indent=1))
        print("VERDICT", json.dumps(verdict.summary()))
        self.result(verdict=verdict.summary())
        return verdict

    def result(self, **figures: Any) -> None:
        """Add `figures` to this test's results file (only when FAULT_RESULTS is set)."""
        if not RESULTS or not self.name:
            return
        path = Path(RESULTS) / f"{self.name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        current = json.loads(path.read_text()) if path.exists() and self._written else {}
        if not self._written:
            current = {
                "test": self.name,
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "commit": _commit(),
                "cut_seconds": float(os.environ.get("FAULT_CUT_SECONDS", "15")),
            }
        self._written = True
        path.write_text(json.dumps({**current, **figures}, indent=1) + "\n")

    def close(self) -> None:
        try:
            self.cuts.heal()
            for run in self.loads:
                if run.proc.poll() is None:
                    run.proc.kill()
                    run.proc.wait(10)
            for gw in self.gateways:
                gw.kill()
            self.groups.close()
        finally:
            self.record.close()


@pytest.fixture(scope="session")
def _cuts_possible() -> None:
    why = netcut.available()
    if why:
        pytest.fail(why)  # the fault suite never skips
    netcut.sweep()


def _commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


@pytest.fixture
def rig(
    _cuts_possible: None, kafka_bootstrap: str, log_dir: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Rig]:
    rig = Rig(kafka_bootstrap, log_dir, tmp_path, request.node.name)
    try:
        yield rig
    finally:
        rig.close()


def wait_until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)
