"""Runs tests/inprocess in a child interpreter: tests of code that loads the gateway's generated
protos, which cannot share protobuf's default descriptor pool with the official client that the
e2e tests import into this process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_inprocess_tests_pass_in_a_child_interpreter() -> None:
    env = {**os.environ, "PUBSUB_GATEWAY_TEST_INPROCESS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/inprocess"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    passed = re.search(r"(\d+) passed", done.stdout)
    assert passed is not None and int(passed.group(1)) >= 5, done.stdout[-2000:]
