"""`python -m conformance`: the official client's system tests against a gateway on a real broker.

1. Fetch google-cloud-pubsub's source distribution (VERSION) from PyPI into .cache/conformance
   with pip, once, and check it against SHA256; a file that does not match is refused, never
   run. Its tests/ folder is extracted afresh on every run, so the tests run as published.
2. Check that the installed client is the same version (the `conformance` extra pins it).
3. Start a broker (the embedded one, as tests/conftest.py does, or PUBSUB_GATEWAY_TEST_KAFKA)
   and one gateway process (tests/gateways.py).
4. Run pytest on SUITES in a process of its own, with conformance/pytest.ini and the plugin
   (conformance/plugin.py), which applies conformance/expected.toml.
5. Print the counts and write them to .cache/conformance/results.json.

Arguments after the options go to pytest (`python -m conformance -- -k listing`).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

PACKAGE = "google-cloud-pubsub"
VERSION = "2.44.0"
SHA256 = "cc59c9a33188cbd97572c7e3b0a095217dd42756b7739cc18f9fa1f14ad79f2c"
ARCHIVE = f"google_cloud_pubsub-{VERSION}.tar.gz"
# What of the distribution runs. Its samples/snippets are not part of the distribution on PyPI
# (its MANIFEST.in takes google/ and tests/ only), so its tests/system.py is what there is.
SUITES = ("tests/system.py",)
# The modules the suites import beyond the client: the `conformance` extra installs them.
NEEDS = {
    "flaky": "flaky",
    "psutil": "psutil",
    "test_utils": "google-cloud-testutils",
    "xdist": "pytest-xdist",
}
# Test processes (pytest-xdist workers). The tests mostly wait (for redeliveries, callbacks that
# sleep, a 60 s window in which nothing may be redelivered), so a few run side by side on 2 cores.
WORKERS = 3
# The whole pytest run may take this long before it is stopped (a few minutes is normal).
RUN_TIMEOUT = 20 * 60

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "conformance"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--cache", type=Path, default=CACHE, help="downloads, sources, logs and results")
    parser.add_argument("--workers", type=int, default=WORKERS, help="pytest-xdist workers; 0: none")
    parser.add_argument("pytest_args", nargs="*", help="passed on to pytest (after --)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    cache: Path = args.cache.resolve()
    results = cache / "results.json"
    results.unlink(missing_ok=True)
    shutil.rmtree(cache / "logs", ignore_errors=True)  # this run's logs only
    check_installed()
    source = extract(fetch(cache), cache / "src")
    check_expected(source)
    with broker(cache) as bootstrap, gateway(bootstrap, cache / "logs") as (grpc, rest):
        workers = ["-n", str(args.workers), "--dist", "worksteal"] if args.workers else []
        code = run_pytest(source, grpc, rest, results, [*workers, *args.pytest_args])
    wall = time.monotonic() - started
    return report(results, code, wall)


# -- the distribution -----------------------------------------------------------------------------
def fetch(cache: Path) -> Path:
    """The pinned sdist in `cache`, downloaded by pip if missing; its sha256 checked every time."""
    archive = cache / ARCHIVE
    if not archive.exists():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:"]
            subprocess.run([*pip, "--dest", tmp, f"{PACKAGE}=={VERSION}"], check=True)
            downloaded = Path(tmp) / ARCHIVE
            if not downloaded.exists():
                raise SystemExit(f"pip did not download {ARCHIVE}: {sorted(os.listdir(tmp))}")
            verify(downloaded)
            downloaded.replace(archive)
    verify(archive)
    return archive


def verify(archive: Path) -> None:
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    if digest != SHA256:
        raise SystemExit(
            f"{archive}: sha256 {digest}, expected {SHA256}.\n"
            "Refusing to run it. Delete the file to download it again."
        )


def extract(archive: Path, dest: Path) -> Path:
    """Extract the distribution's tests/ folder, regular files only, into a fresh `dest`."""
    top = PurePosixPath(ARCHIVE.removesuffix(".tar.gz"))
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            name = PurePosixPath(member.name)
            if not member.isfile() or name.parts[:2] != (*top.parts, "tests"):
                continue
            relative = name.relative_to(top)
            if ".." in relative.parts or relative.is_absolute():
                raise SystemExit(f"{archive}: refusing member {member.name!r}")
            source = tar.extractfile(member)
            assert source is not None
            target = dest.joinpath(*relative.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read())
    for suite in SUITES:
        if not (dest / suite).is_file():
            raise SystemExit(f"{archive} has no {suite}")
    return dest


def check_installed() -> None:
    """The suites must test the client they were written for, with what they import."""
    try:
        installed = importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        installed = "none"
    missing = [dist for module, dist in NEEDS.items() if importlib.util.find_spec(module) is None]
    if installed != VERSION or missing:
        raise SystemExit(
            f"conformance runs {PACKAGE} {VERSION}'s tests against the same client; installed: "
            f"{installed}; missing: {missing or 'nothing'}. Install the extra: "
            "pip install -e '.[test,conformance]' (make conformance does)."
        )


# -- the broker and the gateway -------------------------------------------------------------------
@contextmanager
def broker(cache: Path) -> Iterator[str]:
    external = os.environ.get("PUBSUB_GATEWAY_TEST_KAFKA")
    if external:
        yield external
        return
    from gateway.kafka.local import STOCK, LocalKafka
    from tests.gateways import kafka_version

    logs = cache / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix="conformance-kafka-") as data,
        LocalKafka(
            data_dir=Path(data),
            heap_mb=512,
            profile=STOCK,
            version=kafka_version(),
            log_file=logs / "broker.log",
        ) as kafka,
    ):
        yield kafka.bootstrap


@contextmanager
def gateway(bootstrap: str, logs: Path) -> Iterator[tuple[str, str]]:
    from tests.gateways import GatewayProcess

    logs.mkdir(parents=True, exist_ok=True)
    process = GatewayProcess(bootstrap, f"conf{uuid.uuid4().hex[:8]}", logs).start()
    try:
        yield process.address, process.rest_address
    finally:
        if process.terminate() != 0:
            print(f"conformance: the gateway did not stop cleanly; its log: {process.log_paths[-1]}")


# -- the run --------------------------------------------------------------------------------------
def pytest_command(source: Path, *args: str) -> list[str]:
    config = ROOT / "conformance" / "pytest.ini"
    suites = [str(source / suite) for suite in SUITES]
    return [sys.executable, "-m", "pytest", "-c", str(config), "--rootdir", str(source), *suites, *args]


def pytest_env() -> dict[str, str]:
    """The plugin is imported from this checkout (`-p conformance.plugin`)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def check_expected(source: Path) -> None:
    """Collect once in this process's way, so that a bad expected.toml is reported plainly.

    (Under pytest-xdist the same error ends a worker and reads as an internal error.)
    """
    command = pytest_command(source, "-p", "conformance.plugin", "--gateway", "127.0.0.1:1", "--co", "-q")
    done = subprocess.run(command, cwd=ROOT, env=pytest_env(), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"conformance: collecting the tests failed:\n{done.stdout}{done.stderr}")


def run_pytest(source: Path, grpc: str, rest: str, results: Path, extra: list[str]) -> int:
    plugin = ["-p", "conformance.plugin", "--gateway", grpc, "--gateway-rest", rest]
    command = pytest_command(source, *plugin, "--conformance-results", str(results), *extra)
    try:
        return subprocess.run(
            command, cwd=ROOT, env=pytest_env(), timeout=RUN_TIMEOUT, check=False
        ).returncode
    except subprocess.TimeoutExpired:
        print(f"conformance: pytest ran longer than {RUN_TIMEOUT} s and was stopped")
        return 1


def report(results: Path, code: int, wall: float) -> int:
    if not results.exists():
        print(f"conformance: no results (pytest exited {code}) in {wall:.0f} s")
        return code or 1
    document = json.loads(results.read_text())
    counts = document["counts"]
    document.update(
        package=f"{PACKAGE}=={VERSION}",
        sha256=SHA256,
        suites=list(SUITES),
        pytest_exit=code,
        wall_seconds=round(wall, 1),
    )
    results.write_text(json.dumps(document, indent=2) + "\n")
    # "failed" counts everything that fails the run: failures, errors and strict XPASSes.
    print(f"conformance: {counts['passed']} passed, {counts['failing']} failed, {counts['skipped']} skipped")
    print(
        f"conformance: {counts['xfailed']} expected failures, {counts['xpassed']} unexpected passes, "
        f"{counts['deselected']} deselected (conformance/expected.toml); {wall:.0f} s; {results}"
    )
    return code
