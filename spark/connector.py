"""Spark's Kafka connector, resolved once from Maven Central into the project's cache.

`builder()` returns a SparkSession builder that carries the connector jars (`spark.jars`), for
local runs and tests. The jars come from Maven Central through ``connector-pom.xml`` (``mvn``,
like the embedded broker in gateway/kafka/local.py) and are cached under
``$PUBSUB_GATEWAY_CACHE`` or ``~/.cache/pubsub-gateway``; later runs need no network.

On a cluster, pass the connector to spark-submit instead (the package coordinate is
`PACKAGE`): ``spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0 ...``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SPARK_VERSION = "4.0.0"
"""Must match ``spark.version`` in connector-pom.xml and the pyspark pin in pyproject.toml."""
PACKAGE = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_VERSION}"
# The connector's own jars; lz4, snappy, zstd, slf4j and scala come with Spark itself.
ARTIFACTS = ("spark-sql-kafka-0-10_2.13", "spark-token-provider-kafka-0-10_2.13", "kafka-clients",
             "commons-pool2")
_POM = Path(__file__).resolve().parent / "connector-pom.xml"
_MARKER = "resolved.ok"
_MVN_TIMEOUT = 900.0
_LOG_TAIL = 6000


def cache_dir() -> Path:
    """``$PUBSUB_GATEWAY_CACHE`` or ``~/.cache/pubsub-gateway`` (shared with the embedded broker)."""
    env = os.environ.get("PUBSUB_GATEWAY_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "pubsub-gateway"


def _digest() -> str:
    return hashlib.sha256(_POM.read_bytes()).hexdigest()


def _jars_in(home: Path) -> list[Path]:
    try:
        if (home / _MARKER).read_text().strip() != _digest():
            return []
    except OSError:
        return []
    return sorted((home / "jars").glob("*.jar"))


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def jars(cache: Path | None = None) -> list[Path]:
    """The connector jars, fetched with ``mvn`` on first use only."""
    home = (cache or cache_dir()) / f"spark-kafka-{SPARK_VERSION}"
    found = _jars_in(home)
    if found:
        return found
    home.mkdir(parents=True, exist_ok=True)
    with _file_lock(home / ".lock"):
        if not _jars_in(home):
            _download(home)
    return _jars_in(home)


def _download(home: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError(f"Apache Maven ('mvn') is needed once to fetch {PACKAGE}")
    staging = home / "jars.partial"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copyfile(_POM, home / "pom.xml")
    cmd = [mvn, "-q", "-B", "-f", str(home / "pom.xml"), "dependency:copy-dependencies",
           f"-DoutputDirectory={staging}", "-DincludeScope=runtime",
           f"-DincludeArtifactIds={','.join(ARTIFACTS)}"]
    log.info("resolving %s from Maven Central into %s", PACKAGE, home)
    result = subprocess.run(cmd, cwd=home, capture_output=True, text=True, timeout=_MVN_TIMEOUT,
                            check=False)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr)[-_LOG_TAIL:]
        raise RuntimeError(f"mvn failed to resolve {PACKAGE} (exit {result.returncode}):\n{tail}")
    shutil.rmtree(home / "jars", ignore_errors=True)
    staging.rename(home / "jars")
    (home / _MARKER).write_text(_digest() + "\n")


def builder(app_name: str = "pubsub-gateway", master: str | None = "local[2]",
            driver_memory: str = "1g", cache: Path | None = None) -> Any:
    """A `SparkSession.Builder` with the Kafka connector on the classpath.

    `master=None` leaves the master to spark-submit. Small-machine defaults: few shuffle
    partitions, no UI, UTC session time, and a small pool of idle Kafka consumers (each query
    gets new ones, and an idle consumer keeps its prefetched records: with the default 64, a few
    reads of a log with multi-megabyte checkpoints exhaust a 1 GiB driver).
    """
    from pyspark.sql import SparkSession

    b = SparkSession.builder.appName(app_name)
    if master is not None:
        b = b.master(master)
    return (b.config("spark.jars", ",".join(str(j) for j in jars(cache)))
            .config("spark.driver.memory", driver_memory)
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.kafka.consumer.cache.capacity", "8")
            .config("spark.kafka.consumer.cache.timeout", "30s")
            .config("spark.kafka.consumer.fetchedData.cache.timeout", "30s"))
