"""The Apache Kafka broker's jars, resolved from Maven Central once and cached.

``broker-pom.xml`` names the broker and its logging; ``resolve_broker(cache, version)`` copies
that version's runtime classpath into ``<cache>/kafka-<version>/libs``. Only the first
resolution of a version needs ``mvn`` and the network; a file lock makes concurrent processes
resolve it once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

KAFKA_VERSION = "4.3.1"
"""The broker the embedded Kafka and the test suite run; ``kafka.version`` in broker-pom.xml."""

OLDEST_SUPPORTED = "3.7.2"
"""The oldest Kafka the gateway supports, and is tested against (`make test-kafka-versions`)."""

_POM = Path(__file__).resolve().parent / "broker-pom.xml"
_MARKER = "resolved.ok"
_MVN_TIMEOUT = 900.0
_LOG_TAIL_BYTES = 6000


def default_cache_dir() -> Path:
    """``$PUBSUB_GATEWAY_CACHE`` or ``~/.cache/pubsub-gateway``."""
    env = os.environ.get("PUBSUB_GATEWAY_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "pubsub-gateway"


def _digest(version: str) -> str:
    return hashlib.sha256(_POM.read_bytes() + version.encode()).hexdigest()


def _is_resolved(home: Path, version: str) -> bool:
    marker = home / _MARKER
    try:
        return marker.read_text().strip() == _digest(version) and any((home / "libs").glob("*.jar"))
    except OSError:
        return False


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def resolve_broker(cache_dir: Path, version: str = KAFKA_VERSION) -> Path:
    """The directory holding that broker version's jars; runs ``mvn`` only if not cached yet."""
    home = cache_dir / f"kafka-{version}"
    if _is_resolved(home, version):
        return home / "libs"
    home.mkdir(parents=True, exist_ok=True)
    with _file_lock(home / ".lock"):
        if not _is_resolved(home, version):
            _download(home, version)
    return home / "libs"


def _download(home: Path, version: str) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("Apache Maven ('mvn') is needed once to fetch the Kafka broker jars")
    staging = home / "libs.partial"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copyfile(_POM, home / "pom.xml")  # mvn may write next to the pom; keep the package clean
    cmd = [mvn, "-q", "-B", "-f", str(home / "pom.xml"), "dependency:copy-dependencies",
           f"-Dkafka.version={version}", f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]
    log.info("resolving Apache Kafka %s from Maven Central into %s", version, home)
    started = time.monotonic()
    result = subprocess.run(cmd, cwd=home, capture_output=True, text=True,
                            timeout=_MVN_TIMEOUT, check=False)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr)[-_LOG_TAIL_BYTES:]
        raise RuntimeError(f"mvn failed to resolve Kafka {version} (exit {result.returncode}):\n{tail}")
    shutil.rmtree(home / "libs", ignore_errors=True)
    staging.rename(home / "libs")
    (home / _MARKER).write_text(_digest(version) + "\n")
    log.info("resolved Kafka %s in %.1fs", version, time.monotonic() - started)
