"""The official Go, Java and Node Pub/Sub clients, as programs the end-to-end tests run.

tests/clients/<language>/ holds one small program per language (Go: cloud.google.com/go/pubsub/v2;
Java: com.google.cloud:google-cloud-pubsub; Node: @google-cloud/pubsub), each taking a scenario
and `--name value` flags and printing one JSON object. `build(language)` builds a program once
and caches it under .cache/clients/<language>-<hash>, the hash covering the program's sources,
its lock files and the toolchain's version, so that a warm run builds nothing:
- Go: `go build` with the module proxy, go.sum checked (`-mod=readonly`);
- Java: `mvn dependency:copy-dependencies` (the versions pinned in pom.xml), then `javac`;
- Node: `npm ci` from package-lock.json.
A missing toolchain fails the build: these tests never skip.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "tests" / "clients"
CACHE = ROOT / ".cache" / "clients"
LANGUAGES = ("go", "java", "node")
BUILD_TIMEOUT = 900.0  # a cold Java or Go build downloads its dependencies
JAVA_OPTIONS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")  # 2 shared cores

# What a build depends on, per language: globs relative to tests/clients/<language>.
_INPUTS = {
    "go": ("go.mod", "go.sum", "*.go"),
    "java": ("pom.xml", "src/**/*.java"),
    "node": ("package.json", "package-lock.json", "*.js"),
}
_TOOLS = {"go": ("go",), "java": ("mvn", "javac", "java"), "node": ("npm", "node")}


@dataclass(frozen=True)
class ClientProgram:
    """A built client program: `run` starts it on one scenario and returns its JSON."""

    language: str
    command: tuple[str, ...]
    build_seconds: float
    cached: bool
    path: Path

    def run(self, scenario: str, emulator_host: str, timeout: float = 120.0, **flags: object) -> Any:
        argv = [*self.command, scenario]
        for name, value in flags.items():
            argv += [f"--{name.replace('_', '-')}", str(value)]
        # METADATA_SERVER_DETECTION=none: the auth libraries never probe the metadata server.
        env = {**os.environ, "PUBSUB_EMULATOR_HOST": emulator_host, "METADATA_SERVER_DETECTION": "none"}
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise AssertionError(
                f"{self.language} {scenario} exited with {proc.returncode}:\n{proc.stderr[-6000:]}"
            )
        lines = proc.stdout.strip().splitlines()
        assert lines, f"{self.language} {scenario} printed nothing; stderr:\n{proc.stderr[-4000:]}"
        return json.loads(lines[-1])


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not on PATH: the official-client tests need it", pytrace=False)
    return path


def _output(*argv: str) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    return proc.stdout + proc.stderr


def _toolchain(language: str) -> str:
    """The version of what compiles the program (a new compiler is a new build)."""
    if language == "go":
        return _output(_tool("go"), "env", "GOVERSION")
    if language == "java":
        return _output(_tool("javac"), "-version")
    return _output(_tool("node"), "--version")


def _inputs(language: str) -> list[Path]:
    src = SOURCES / language
    return sorted({p for pattern in _INPUTS[language] for p in src.glob(pattern) if p.is_file()})


def source_hash(language: str) -> str:
    digest = hashlib.sha256(_toolchain(language).encode())
    for path in _inputs(language):
        digest.update(str(path.relative_to(SOURCES)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _run_build(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    started = time.monotonic()
    proc = subprocess.run(
        argv,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"{' '.join(argv)} failed ({proc.returncode}, {time.monotonic() - started:.0f} s):\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}",
            pytrace=False,
        )


def _build_go(out: Path) -> None:
    # -mod=readonly: go.sum must already hold every module; GOTOOLCHAIN=local: no toolchain
    # download when go.mod asks for a newer Go, just an error.
    _run_build(
        [_tool("go"), "build", "-trimpath", "-o", str(out / "client"), "."],
        cwd=SOURCES / "go",
        env={"GOFLAGS": "-mod=readonly", "GOTOOLCHAIN": "local"},
    )


def _build_java(out: Path) -> None:
    shutil.copy2(SOURCES / "java" / "pom.xml", out / "pom.xml")
    _run_build(
        [
            _tool("mvn"),
            "-q",
            "-B",
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={out / 'lib'}",
        ],
        cwd=out,
    )
    sources = [str(p) for p in _inputs("java") if p.suffix == ".java"]
    _run_build(
        [
            _tool("javac"),
            "--release",
            "17",
            "-cp",
            str(out / "lib" / "*"),
            "-d",
            str(out / "classes"),
            *sources,
        ],
        cwd=out,
    )


def _build_node(out: Path) -> None:
    for name in ("package.json", "package-lock.json", "client.js"):
        shutil.copy2(SOURCES / "node" / name, out / name)
    _run_build(
        [_tool("npm"), "ci", "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=out,
    )


def _command(language: str, path: Path) -> tuple[str, ...]:
    if language == "go":
        return (str(path / "client"),)
    if language == "java":
        classpath = f"{path / 'classes'}{os.pathsep}{path / 'lib' / '*'}"
        return (_tool("java"), *JAVA_OPTIONS, "-cp", classpath, "gateway.clients.Main")
    return (_tool("node"), str(path / "client.js"))


_BUILDERS = {"go": _build_go, "java": _build_java, "node": _build_node}


def build(language: str) -> ClientProgram:
    """The program for `language`, from the cache or built now (then cached)."""
    for tool in _TOOLS[language]:
        _tool(tool)
    started = time.monotonic()
    final = CACHE / f"{language}-{source_hash(language)}"
    cached = final.is_dir()
    if not cached:
        CACHE.mkdir(parents=True, exist_ok=True)
        work = CACHE / f"{final.name}.tmp{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        try:
            _BUILDERS[language](work)
            try:
                work.rename(final)  # atomic: a cache entry is complete or absent
            except OSError:
                if not final.is_dir():
                    raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
        _prune(language, keep=final)
    return ClientProgram(language, _command(language, final), time.monotonic() - started, cached, final)


def _prune(language: str, keep: Path, age: float = 3600.0) -> None:
    """Drop this language's builds of other sources, once an hour old."""
    for old in CACHE.glob(f"{language}-*"):
        if old != keep and time.time() - old.stat().st_mtime > age:
            shutil.rmtree(old, ignore_errors=True)
