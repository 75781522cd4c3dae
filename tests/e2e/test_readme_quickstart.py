"""The README's quick start, run as it stands there (only the gateway's address is this test's),
with the project's interpreter, against a gateway of its own (so its names are new)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import GatewayFactory

README = Path(__file__).resolve().parents[2] / "README.md"


def quick_start() -> str:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Quick start with the Python client") :]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "the quick start has no python block"
    return found.group(1)


def test_the_readme_quick_start_prints_what_it_says(start_gateway: GatewayFactory, tmp_path: Path) -> None:
    gw = start_gateway()
    code = quick_start()
    assert '"localhost:8085"' in code  # make run's address, which the test replaces
    script = tmp_path / "quickstart.py"
    script.write_text(code.replace('"localhost:8085"', repr(gw.address)))
    env = {k: v for k, v in os.environ.items() if k != "PUBSUB_EMULATOR_HOST"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    promised = re.search(r"# (b'hello' .*)$", code, re.M)
    assert promised is not None
    assert done.stdout.strip() == promised.group(1), done.stdout
