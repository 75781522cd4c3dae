"""The Apache Kafka broker's jars, resolved from Maven Central once and cached.

``broker-pom.xml`` names the broker and its logging; ``resolve_broker(cache, version)`` copies
that version's runtime classpath into ``<cache>/kafka-<version>/libs``. Only the first
resolution of a version needs ``mvn`` and the network (``gateway/mavenjars.py``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from gateway.mavenjars import default_cache_dir, resolve

__all__ = ["KAFKA_VERSION", "OLDEST_SUPPORTED", "default_cache_dir", "resolve_broker"]

KAFKA_VERSION = "4.3.1"
"""The broker the embedded Kafka and the test suite run; ``kafka.version`` in broker-pom.xml."""

OLDEST_SUPPORTED = "3.7.2"
"""The oldest Kafka the gateway supports, and is tested against (`make test-kafka-versions`)."""

_POM = Path(__file__).resolve().parent / "broker-pom.xml"


def resolve_broker(cache_dir: Path, version: str = KAFKA_VERSION) -> Path:
    """The directory holding that broker version's jars; runs ``mvn`` only if not cached yet."""
    home = cache_dir / f"kafka-{version}"
    digest = hashlib.sha256(_POM.read_bytes() + version.encode()).hexdigest()
    resolve(home, "libs", digest, _POM, [f"-Dkafka.version={version}"], f"Apache Kafka {version}")
    return home / "libs"
