"""The Go load generator (benchmarks/gen/go, on the official `cloud.google.com/go/pubsub/v2`):
built once per run with `go build`, run from a pool process per measurement. Its modes print one
JSON object: count, t0, t1, cpu_s like every generator's result, and the RPCs and stream
requests the client sent (`rpcs`, counted by a gRPC interceptor in the program)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).resolve().parent / "go"
BINARY = SOURCE.parents[2] / ".cache" / "gobench" / "gobench"
BUILD_TIMEOUT = 600.0
PROJECT = "bench"


def build() -> Path:
    """`go build` the generator into .cache/gobench/. go.sum is committed (-mod=readonly) and
    GOTOOLCHAIN=local: no toolchain download; modules come from the module proxy (or the module
    cache). Returns the binary's path."""
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("`go` is required for the goclient scenario (Go 1.26 or newer)")
    BINARY.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [go, "build", "-trimpath", "-o", str(BINARY), "."],
        cwd=SOURCE,
        env={**os.environ, "GOFLAGS": "-mod=readonly", "GOTOOLCHAIN": "local"},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"go build of {SOURCE} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return BINARY


def _flags(args: dict[str, Any], names: tuple[str, ...]) -> list[str]:
    out = ["--project", PROJECT, "--start-at", repr(float(args["start_at"]))]
    for name in names:
        if name in args:
            out += [f"--{name.replace('_', '-')}", str(args[name])]
    return out


def _run(mode: str, args: dict[str, Any], names: tuple[str, ...], timeout: float) -> dict[str, Any]:
    env = {**os.environ, "PUBSUB_EMULATOR_HOST": args["address"]}
    started = time.monotonic()
    done = subprocess.run(
        [args.get("binary", str(BINARY)), mode, *_flags(args, names)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"gobench {mode} exited {done.returncode} after {time.monotonic() - started:.0f} s:\n"
            f"{done.stderr[-3000:]}"
        )
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def go_publish(args: dict[str, Any]) -> dict[str, Any]:
    """Publisher.Publish with the default batching for `seconds` (or until `count` messages),
    `outstanding` results open, each message with `attributes` attributes."""
    names = ("topic", "seconds", "count", "outstanding", "attributes")
    return _run(
        "publish", args, names, float(args.get("seconds", 0)) + float(args.get("count", 0)) / 1000 + 120
    )


def go_receive(args: dict[str, Any]) -> dict[str, Any]:
    """Subscriber.Receive (default settings, or `goroutines` / `max_outstanding` raised),
    acking in the callback, until `expected` distinct messages; duplicates counted, and the
    seconds from the Receive call to the first message (`first_message_s`)."""
    names = ("subscription", "expected", "goroutines", "max_outstanding", "deadline")
    return _run("receive", args, names, float(args.get("deadline", 600)) + 60)


def go_latency(args: dict[str, Any]) -> dict[str, Any]:
    """Publish at a fixed `rate` for `seconds` and Receive on one client: p50/p99/max ms."""
    names = ("topic", "subscription", "rate", "seconds")
    return _run("latency", args, names, float(args["seconds"]) + 90)
