"""Network partitions on loopback: packets from one process to some ports dropped, then let through.

A process the fault suite may cut off is started with a group id of its own (`setpriv --regid`,
its user still root, so it reads every file as before). A rule in the mangle table marks each
connection that group opens with the group id (`-m owner --gid-owner G`, CONNMARK, on the
connection's first packet). A cut is a rule on the OUTPUT chain of the loopback interface that
drops every packet of the marked connections to the named ports, in both directions: a cut
that only dropped what the group sends would still let the other side's replies in (a fetch
answered before the cut went on arriving). Dropping, not refusing: each side sees silence, as
across a dead switch, and TCP retransmits until the rule goes. All traffic stays on 127.0.0.1.

Cutting two processes apart is two cuts, one per side that opens connections to the other.
Every rule carries the comment `pgw-fault-<pytest worker>`; `sweep()` removes this worker's left
by a run that died (never another worker's, which may be cutting now), and the rules of a
`Cuts` and a `Groups` go when they close (and at exit).
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

# Each pytest worker tags its own rules: a worker's sweep must not take another's cut away.
COMMENT = f"pgw-fault-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
# Group ids nothing on the machine uses; each pytest worker takes its own block of them.
GID_BASE = 47100
GIDS_PER_WORKER = 50


def available() -> str | None:
    """None when cuts can be made here, else why not (the fault tests fail with it: they never
    skip)."""
    if os.geteuid() != 0:
        return "network cuts need root (iptables and setpriv --regid)"
    missing = [tool for tool in ("iptables", "setpriv") if shutil.which(tool) is None]
    if missing:
        return f"network cuts need {' and '.join(missing)} (make test-faults installs iptables)"
    return None


def _iptables(*args: str) -> None:
    subprocess.run(["iptables", "-w", "5", *args], check=True, capture_output=True, timeout=30)


_TAGGED = ["-m", "comment", "--comment", COMMENT]


def _mark_rule(gid: int) -> list[str]:
    """Mark the connections `gid` opens (mangle table)."""
    owner = ["-m", "owner", "--gid-owner", str(gid), "-m", "conntrack", "--ctdir", "ORIGINAL"]
    return ["-t", "mangle", "OUTPUT", "-o", "lo", *owner, *_TAGGED, "-j", "CONNMARK", "--set-mark", str(gid)]


def _drop_rule(gid: int, port: int) -> list[str]:
    """Drop both directions of `gid`'s connections to `port`."""
    match = ["-m", "connmark", "--mark", str(gid), "-m", "conntrack", "--ctorigdstport", str(port)]
    return ["OUTPUT", "-o", "lo", "-p", "tcp", *match, *_TAGGED, "-j", "DROP"]


def _add(rule: list[str], first: bool = False) -> None:
    table = rule[:2] if rule[0] == "-t" else []
    chain = rule[len(table) :]
    _iptables(*table, "-I" if first else "-A", *chain)


def _delete(rule: list[str]) -> None:
    """Remove one copy of `rule`; nothing if it is gone already (a `sweep()` took it)."""
    table = rule[:2] if rule[0] == "-t" else []
    probe = ["iptables", "-w", "5", *table, "-C", *rule[len(table) :]]
    if subprocess.run(probe, capture_output=True, timeout=30).returncode == 0:
        _iptables(*table, "-D", *rule[len(table) :])


def sweep() -> int:
    """Remove every rule of ours (a run killed mid-cut leaves its rules behind)."""
    removed = 0
    for table in ("filter", "mangle"):
        out = subprocess.run(
            ["iptables", "-w", "5", "-t", table, "-S", "OUTPUT"],
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        for line in out.splitlines():
            if COMMENT in line.split():
                _iptables("-t", table, "-D", *line.split()[1:])
                removed += 1
    return removed


def dropped() -> int:
    """Packets this worker's cuts in place now have dropped (iptables' rule counters)."""
    out = subprocess.run(
        ["iptables", "-w", "5", "-v", "-S", "OUTPUT"], check=True, capture_output=True, text=True, timeout=30
    ).stdout
    total = 0
    for line in out.splitlines():
        words = line.split()
        if COMMENT in words and "DROP" in words and "-c" in words:
            total += int(words[words.index("-c") + 1])
    return total


class Groups:
    """Hands out group ids for processes to be cut off; `wrap(gid)` prefixes their command."""

    def __init__(self, worker: str = "") -> None:
        index = int(worker.removeprefix("gw") or 0) if worker.removeprefix("gw").isdigit() else 0
        self._next = GID_BASE + index * GIDS_PER_WORKER
        self._end = self._next + GIDS_PER_WORKER
        self._lock = threading.Lock()

        self._marked: list[list[str]] = []
        atexit.register(self.close)

    def take(self) -> int:
        """A group id of this worker's, its connections marked from now on."""
        with self._lock:
            if self._next >= self._end:
                raise RuntimeError("out of fault group ids for this worker")
            self._next += 1
            gid = self._next - 1
            rule = _mark_rule(gid)
            _add(rule)
            self._marked.append(rule)
            return gid

    def close(self) -> None:
        with self._lock:
            rules, self._marked = self._marked, []
        for rule in rules:
            _delete(rule)

    @staticmethod
    def wrap(gid: int) -> list[str]:
        return ["setpriv", f"--regid={gid}", "--clear-groups", "--"]


class Cuts:
    """The rules one test put in place; `cut` drops, `heal` lets through again."""

    def __init__(self) -> None:
        self._rules: list[list[str]] = []
        self._lock = threading.Lock()
        self.dropped = 0  # packets the last cut dropped, read as it healed
        atexit.register(self.heal)

    def cut(self, gid: int, ports: Iterable[int]) -> None:
        """Drop every packet, both ways, of the connections group `gid` opened or opens to
        `ports` on loopback, from now on."""
        for port in sorted(set(ports)):
            rule = _drop_rule(gid, port)
            _add(rule, first=True)
            with self._lock:
                self._rules.append(rule)

    def heal(self) -> None:
        with self._lock:
            rules, self._rules = self._rules, []
        if rules:
            self.dropped = dropped()
        for rule in rules:
            _delete(rule)

    @contextmanager
    def cutting(self, pairs: Iterable[tuple[int, Iterable[int]]]) -> Iterator[None]:
        for gid, ports in pairs:
            self.cut(gid, ports)
        try:
            yield
        finally:
            self.heal()
