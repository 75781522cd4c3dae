"""Spark's Kafka connector, resolved once from Maven Central into the project's cache.

`builder()` returns a SparkSession builder that carries the connector jars (`spark.jars`), for
local runs and tests. The jars come from Maven Central through ``connector-pom.xml`` (``mvn``,
like the embedded broker: gateway/mavenjars.py) and are cached under
``$PUBSUB_GATEWAY_CACHE`` or ``~/.cache/pubsub-gateway``; later runs need no network.

On a cluster, pass the connector to spark-submit instead (the package coordinate is
`PACKAGE`): ``spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0 ...``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.mavenjars import default_cache_dir, resolve

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SPARK_VERSION = "4.0.0"
"""Must match ``spark.version`` in connector-pom.xml and the pyspark pin in pyproject.toml."""
PACKAGE = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_VERSION}"
# The connector's own jars; lz4, snappy, zstd, slf4j and scala come with Spark itself.
ARTIFACTS = (
    "spark-sql-kafka-0-10_2.13",
    "spark-token-provider-kafka-0-10_2.13",
    "kafka-clients",
    "commons-pool2",
)
_POM = Path(__file__).resolve().parent / "connector-pom.xml"


def jars(cache: Path | None = None) -> list[Path]:
    """The connector jars, fetched with ``mvn`` on first use only."""
    home = (cache or default_cache_dir()) / f"spark-kafka-{SPARK_VERSION}"
    digest = hashlib.sha256(_POM.read_bytes()).hexdigest()
    return resolve(home, "jars", digest, _POM, [f"-DincludeArtifactIds={','.join(ARTIFACTS)}"], PACKAGE)


def builder(
    app_name: str = "pubsub-gateway",
    master: str | None = "local[2]",
    driver_memory: str = "1g",
    cache: Path | None = None,
) -> SparkSession.Builder:
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
    return (
        b.config("spark.jars", ",".join(str(j) for j in jars(cache)))
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.kafka.consumer.cache.capacity", "8")
        .config("spark.kafka.consumer.cache.timeout", "30s")
        .config("spark.kafka.consumer.fetchedData.cache.timeout", "30s")
    )
