"""A Spark standalone cluster (a master and two workers on loopback) for the session, and a
SparkSession on it whose executors are JVMs of their own (benchmarks/spark_standalone.py).

Run with `make test-spark-cluster`; other runs leave these tests out (the `spark_cluster`
marker): a pytest process holds one SparkContext, and tests/spark's is local[2].
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from benchmarks.spark_standalone import Standalone, await_executors
from spark import connector
from tests.spark.conftest import _collect_sockets, _cwd  # noqa: F401 (the autouse fixture)

EXECUTORS = 2


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    work = tmp_path_factory.mktemp("spark-standalone")
    with Standalone(work, workers=2) as c:
        old = os.environ.get("SPARK_CONF_DIR")
        os.environ["SPARK_CONF_DIR"] = str(c.conf_dir)  # the session's JVM and export jobs read it
        try:
            yield c
        finally:
            if old is None:
                os.environ.pop("SPARK_CONF_DIR", None)
            else:
                os.environ["SPARK_CONF_DIR"] = old


@pytest.fixture(scope="session")
def spark(cluster: Standalone, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    with _cwd(tmp_path_factory.mktemp("spark-cwd")):
        session = (
            connector.builder("pubsub-gateway-cluster-tests", cluster.master_url, "1g")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
    session.sparkContext.setLogLevel("ERROR")
    await_executors(session, EXECUTORS)
    yield session
    session.stop()


def repo() -> Path:
    return Path(__file__).resolve().parents[2]
