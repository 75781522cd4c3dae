"""What the benchmark reads from /proc: a process's CPU time and memory, the machine's CPU use,
which process listens on a port, and a description of the machine."""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1


@dataclasses.dataclass(frozen=True, slots=True)
class ProcSample:
    """One look at a process: CPU seconds used so far, resident and peak resident MiB."""

    cpu_s: float
    rss_mb: float
    hwm_mb: float


def proc_sample(pid: int | None) -> ProcSample | None:
    """CPU (utime+stime of /proc/<pid>/stat) and VmRSS/VmHWM; None if the process is gone."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14, 15 of stat)
    mem = {k: v for k, _, v in (line.partition(":") for line in status.splitlines())}
    return ProcSample(cpu, _kib_to_mb(mem.get("VmRSS", "0 kB")), _kib_to_mb(mem.get("VmHWM", "0 kB")))


def _kib_to_mb(text: str) -> float:
    return int(text.split()[0]) / 1024


def children_of(pid: int) -> list[int]:
    """The child processes of `pid` (from /proc/<pid>/task/*/children); none if it is gone."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found.extend(int(child) for child in task.read_text().split())
        except OSError:
            continue
    return sorted(found)


def threads(pid: int) -> dict[str, tuple[int, int]]:
    """Each of the process's threads, by name (a number added where names repeat): CPU time in
    ns (/proc/<pid>/task/<tid>/schedstat, exact where stat's ticks are 10 ms) and context
    switches (voluntary and not)."""
    out: dict[str, tuple[int, int]] = {}
    for task in sorted(Path(f"/proc/{pid}/task").iterdir(), key=lambda p: int(p.name)):
        try:
            stat = (task / "stat").read_text()
            ns = int((task / "schedstat").read_text().split()[0])
            status = (task / "status").read_text()
        except OSError:
            continue  # the thread ended
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        switches = sum(int(line.split()[1]) for line in status.splitlines() if "ctxt_switches" in line)
        key, n = name, 1
        while key in out:
            n += 1
            key = f"{name}#{n}"
        out[key] = (ns, switches)
    return out


def machine_busy_s() -> float:
    """CPU seconds the whole machine has spent busy (all cores), from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return (sum(values[:8]) - idle) / _TICK


def background_cpu_pct(seconds: float = 2.0) -> float:
    """% of all cores busy over `seconds` (before the run: other people's load on the machine)."""
    busy0, t0 = machine_busy_s(), time.monotonic()
    time.sleep(seconds)
    return 100.0 * (machine_busy_s() - busy0) / (time.monotonic() - t0) / CORES


def pid_listening_on(port: int) -> int | None:
    """The pid of a process of ours that listens on TCP `port` (e.g. a Kafka broker), if any."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    return int(proc.name)
        except OSError:
            continue
    return None


def _listening_inodes(port: int) -> set[str]:
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                found.add(f"socket:[{cols[9]}]")
    return found


def kafka_version_of(pid: int | None) -> str | None:
    """The Kafka version in a broker JVM's class path (its jars are named kafka-X.Y.Z...)."""
    if pid is None:
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return None
    found = re.search(r"kafka[-_](?:2\.\d+-)?(\d+\.\d+\.\d+)", cmdline)
    return found.group(1) if found else None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / 1024 / 1024, 1)
    return 0.0


def source_version() -> dict[str, object]:
    """The commit the gateway code comes from, and whether gateway/ differs from it."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        try:
            done = subprocess.run(
                ["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return done.stdout.strip()

    return {
        "commit": git("rev-parse", "--short", "HEAD") or "unknown",
        "gateway_modified": bool(git("status", "--porcelain", "--", "gateway")),
    }


def describe_machine(kafka_version: str) -> dict[str, object]:
    import confluent_kafka
    import google.protobuf
    import grpc

    return {
        "cores": CORES,
        "memory_gib": _memory_gib(),
        "cpu_model": _cpu_model(),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "python_executable": os.path.realpath(sys.executable),  # which build: distro, pyenv, ...
        "kafka": kafka_version,
        "confluent_kafka": confluent_kafka.__version__,
        "librdkafka": confluent_kafka.libversion()[0],
        "grpcio": grpc.__version__,
        "protobuf": google.protobuf.__version__,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
