"""One local SparkSession (local[2], 1 GiB driver) for the whole test session.

PySpark's `collect` leaves its result socket to the garbage collector (a ResourceWarning):
test modules here carry `SPARK_WARNINGS`, and every test ends with a collection, so no
socket of ours is finalized during another suite's test.
"""

from __future__ import annotations

import contextlib
import gc
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark import connector

SPARK_WARNINGS = [
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


@pytest.fixture(autouse=True)
def _collect_sockets() -> Iterator[None]:
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@contextlib.contextmanager
def _cwd(path: Path) -> Iterator[None]:
    old = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    # Spark 4.0.0 keeps an `artifacts` directory in the JVM's working directory (SPARK-52396):
    # start the JVM elsewhere so that no run, however it ends, leaves one in the repository.
    with _cwd(tmp_path_factory.mktemp("spark-cwd")):
        session = (
            connector.builder("pubsub-gateway-tests", "local[2]", "1g")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
