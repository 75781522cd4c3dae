"""Jars resolved from Maven Central once and cached: the broker's and Spark's Kafka connector.

Each set lives in ``<cache>/<name>/<subdir>`` with a marker holding the digest of what resolved
it (its pom and arguments); a different digest resolves again. Only the first resolution
needs ``mvn`` and the network, and a file lock makes concurrent processes resolve it once.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

log = logging.getLogger(__name__)

_MARKER = "resolved.ok"
_MVN_TIMEOUT = 900.0
_LOG_TAIL_BYTES = 6000


def default_cache_dir() -> Path:
    """``$PUBSUB_GATEWAY_CACHE`` or ``~/.cache/pubsub-gateway``."""
    env = os.environ.get("PUBSUB_GATEWAY_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "pubsub-gateway"


def cached(home: Path, subdir: str, digest: str) -> list[Path]:
    """The jars resolved into ``home/subdir`` by `digest`; empty if none were."""
    try:
        if (home / _MARKER).read_text().strip() != digest:
            return []
    except OSError:
        return []
    return sorted((home / subdir).glob("*.jar"))


def resolve(home: Path, subdir: str, digest: str, pom: Path, args: Sequence[str], what: str) -> list[Path]:
    """The jars of `pom`'s runtime classpath (``mvn dependency:copy-dependencies`` with `args`)
    in ``home/subdir``; runs ``mvn`` only if they are not cached for `digest` yet."""
    found = cached(home, subdir, digest)
    if found:
        return found
    home.mkdir(parents=True, exist_ok=True)
    with _file_lock(home / ".lock"):
        if not cached(home, subdir, digest):
            _download(home, subdir, digest, pom, args, what)
    return cached(home, subdir, digest)


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _download(home: Path, subdir: str, digest: str, pom: Path, args: Sequence[str], what: str) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError(f"Apache Maven ('mvn') is needed once to fetch {what}")
    staging = home / f"{subdir}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copyfile(pom, home / "pom.xml")  # mvn may write next to the pom; keep the package clean
    cmd = [
        mvn,
        "-q",
        "-B",
        "-f",
        str(home / "pom.xml"),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={staging}",
        "-DincludeScope=runtime",
        *args,
    ]
    log.info("resolving %s from Maven Central into %s", what, home)
    started = time.monotonic()
    result = subprocess.run(cmd, cwd=home, capture_output=True, text=True, timeout=_MVN_TIMEOUT, check=False)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr)[-_LOG_TAIL_BYTES:]
        raise RuntimeError(f"mvn failed to resolve {what} (exit {result.returncode}):\n{tail}")
    shutil.rmtree(home / subdir, ignore_errors=True)
    staging.rename(home / subdir)
    (home / _MARKER).write_text(digest + "\n")
    log.info("resolved %s in %.1fs", what, time.monotonic() - started)
