"""The pytest plugin of `pubsub-kafka-gateway[testing]` (gateway/testing), used as a user uses it:
a test suite of their own, in a pytest run of its own, with the official client and nothing but
the `pubsub_gateway` fixture; the example of docs/testing.md."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from tests.doc_examples import example

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def docs_example() -> str:
    """The fixture's example in docs/testing.md, as it is printed there."""
    return example("docs/testing.md", "testing-fixture")


USER_TESTS = (
    docs_example()
    + """

import os


def test_the_session_points_the_clients_at_the_gateway(pubsub_gateway, pubsub_project):
    assert os.environ["PUBSUB_EMULATOR_HOST"] == pubsub_gateway.address
    assert pubsub_project == pubsub_gateway.project == "shop-tests"
    assert pubsub_gateway.kafka_bootstrap
"""
)

CONFTEST = """
import os
from pathlib import Path


def pytest_unconfigure(config):
    Path(os.environ["ENV_AFTER"]).write_text(os.environ.get("PUBSUB_EMULATOR_HOST", "<unset>"))
"""


def run_user_suite(tmp_path: Path, tests: str, ini: str = "") -> tuple[subprocess.CompletedProcess[str], str]:
    """pytest on a suite in `tmp_path`, with this checkout's gateway package and its plugin: by
    its entry point once the package is installed with it, else by name."""
    (tmp_path / "test_user.py").write_text(textwrap.dedent(tests))
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\n" + ini)
    registered = any(ep.value == "gateway.testing.pytest_plugin" for ep in entry_points(group="pytest11"))
    plugin = [] if registered else ["-p", "gateway.testing.pytest_plugin"]
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "ENV_AFTER": str(tmp_path / "env-after"),
        "PUBSUB_EMULATOR_HOST": "before:1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin, str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,  # a first start on a machine fetches the broker's jars
        check=False,
    )
    return done, (tmp_path / "env-after").read_text()


def test_a_users_suite_runs_on_the_session_gateway_and_the_environment_is_restored(tmp_path: Path) -> None:
    ini = "pubsub_gateway_project = shop-tests\npubsub_gateway_args = --pull-max-wait-seconds 2\n"
    done, after = run_user_suite(tmp_path, USER_TESTS, ini)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
    assert after == "before:1"  # restored when the session ended


def test_a_suite_that_does_not_ask_starts_nothing(tmp_path: Path) -> None:
    tests = """
        import os

        def test_untouched():
            assert os.environ["PUBSUB_EMULATOR_HOST"] == "before:1"
    """
    done, after = run_user_suite(tmp_path, tests)
    assert done.returncode == 0, done.stdout + done.stderr
    assert after == "before:1"
    assert not list(tmp_path.glob("**/gateway.log"))
