"""A Spark standalone cluster on loopback, from the pyspark package: a master and workers, each a
JVM started with `bin/spark-class` (no sbin daemons: the processes are ours, in sessions of
their own, and stopped by their pids). Used by tests/spark_cluster and
benchmarks/spark_cluster_bench.py.

Applications reach it through `SPARK_CONF_DIR` (its `spark-defaults.conf`): small executors
(512 MiB unless told, one core each, at most two cores per application, so that two
applications, a test's session and an export job, run side by side), the driver on 127.0.0.1,
and executors that run this interpreter with the repository on their PYTHONPATH, so that Python
code of `gateway` and `spark` loads in other JVMs' Python workers too.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pyspark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT = 90.0


def _wait_for(log: Path, pattern: str, proc: subprocess.Popen[bytes], timeout: float) -> re.Match[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        found = re.search(pattern, text)
        if found:
            return found
        if proc.poll() is not None:
            raise RuntimeError(f"{log.name} ended ({proc.returncode}): {text[-3000:]}")
        time.sleep(0.1)
    raise TimeoutError(f"{pattern!r} not in {log} after {timeout} s")


class Standalone:
    def __init__(
        self,
        work: Path,
        workers: int = 2,
        cores: int = 2,
        memory: str = "1100m",
        executor_memory: str = "512m",
    ) -> None:
        self.work = work
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.executor_memory = executor_memory
        self.master_url = ""
        self.conf_dir = work / "conf"
        self._procs: list[subprocess.Popen[bytes]] = []

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "SPARK_HOME": str(Path(pyspark.__file__).parent),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_CONF_DIR": str(self.conf_dir),
            "PYSPARK_PYTHON": sys.executable,
        }

    def _start(self, name: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.work / f"{name}.log"
        spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [str(spark_class), *args],
                cwd=self.work,
                env=self.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._procs.append(proc)
        return proc, log

    def start(self) -> Standalone:
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        defaults = {
            "spark.executor.memory": self.executor_memory,
            "spark.executor.cores": "1",
            "spark.cores.max": "2",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.pyspark.python": sys.executable,
            "spark.executorEnv.PYTHONPATH": str(REPO),
        }
        (self.conf_dir / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in defaults.items()))
        master, log = self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--webui-port",
            "0",
        )
        self.master_url = _wait_for(log, r"Starting Spark master at (spark://\S+)", master, START_TIMEOUT)[1]
        started = []
        for i in range(self.workers):
            work_dir = self.work / f"worker-{i}"
            work_dir.mkdir(exist_ok=True)
            started.append(
                self._start(
                    f"worker-{i}",
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--webui-port",
                    "0",
                    "--cores",
                    str(self.cores),
                    "--memory",
                    self.memory,
                    "--work-dir",
                    str(work_dir),
                    self.master_url,
                )
            )
        for proc, log in started:
            _wait_for(log, r"Successfully registered with master", proc, START_TIMEOUT)
        return self

    def stop(self) -> None:
        for proc in reversed(self._procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self._procs):
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        self._procs.clear()

    def __enter__(self) -> Standalone:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def executors(session: SparkSession) -> int:
    """Executors registered with the driver (the driver's own block manager not counted)."""
    return int(session.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1


def await_executors(session: SparkSession, n: int, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while executors(session) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{executors(session)} of {n} executors registered after {timeout} s")
        time.sleep(0.2)
