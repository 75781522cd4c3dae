"""The container tier: the images built from docker/Dockerfile, the compose stack brought up as
docker/README.md says, and PubSubKafkaContainer from a user's own suite, on a Docker engine.

Where no image registry can be reached (these machines), the engine is this checkout's own and
the bases are local (docker/local/engine.sh): the tests change nothing but the base images'
names, and let builds reach the package registries through the host's network. The figures the
tier measures (image sizes, build and start times) are written to PUBSUB_GATEWAY_CONTAINER_RESULTS
(default .cache/containers/results.json)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from gateway.kafka.brokerjars import KAFKA_VERSION

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "docker" / "local" / "engine.sh"
PYTHON_BASE = "pubsub-gateway-local/python:3.11-bookworm"
KAFKA_IMAGE = f"pubsub-gateway-local/kafka:{KAFKA_VERSION}"
# What a machine without Docker Hub sets (docker/README.md, "Without Docker Hub"). COMPOSE_BAKE:
# compose's bake builder asks for the host network as a privilege, the classic one does not.
LOCAL = {
    "KAFKA_IMAGE": KAFKA_IMAGE,
    "PYTHON_IMAGE": PYTHON_BASE,
    "BUILD_NETWORK": "host",
    "COMPOSE_BAKE": "false",
}
RESULTS = Path(
    os.environ.get("PUBSUB_GATEWAY_CONTAINER_RESULTS", ROOT / ".cache" / "containers" / "results.json")
)


def run(
    cmd: str | list[str], timeout: float = 600, check: bool = True, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    args = shlex.split(cmd) if isinstance(cmd, str) else cmd
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False, **kwargs)
    if check and done.returncode != 0:
        raise AssertionError(f"{args} exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


@pytest.fixture(scope="session")
def engine() -> dict[str, str]:
    """The engine started and the local bases built; the environment of every docker command."""
    started = time.monotonic()
    run([str(ENGINE), "install", "start", "bases", "kafka"], timeout=1200)
    exports = run([str(ENGINE), "env"]).stdout.split("export ", 1)[1].split()
    env = dict(item.split("=", 1) for item in exports)
    os.environ.update(env)
    record("engine_and_bases_seconds", round(time.monotonic() - started, 1), fresh=True)
    return env


def record(name: str, value: Any, fresh: bool = False) -> None:
    """A figure of this run, merged into RESULTS at once (a later failure keeps what was
    measured); `fresh` starts the file anew."""
    figures: dict[str, Any] = {}
    if RESULTS.exists() and not fresh:
        figures = json.loads(RESULTS.read_text()).get("figures", {})
    figures[name] = value
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout
    document = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit.strip(),
        "engine": "Debian docker.io (dockerd without a default bridge); local Debian bases",
        "figures": figures,
    }
    RESULTS.write_text(json.dumps(document, indent=2) + "\n")


def image_mb(name: str) -> float:
    size = int(run(["docker", "image", "inspect", name, "--format", "{{.Size}}"]).stdout)
    return round(size / 1e6, 1)


_ORDER = ("test_images.py", "test_compose.py", "test_testcontainers.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The images first, built from the bases (their build times are then true ones), then the
    stack, which builds on their cache, then testcontainers."""
    items.sort(key=lambda item: _ORDER.index(item.path.name) if item.path.name in _ORDER else len(_ORDER))
