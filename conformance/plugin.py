"""The pytest plugin the downloaded tests run with (`-p conformance.plugin`).

It gives the tests what they would find on a developer's machine pointed at an emulator:
- PUBSUB_EMULATOR_HOST, the gateway's gRPC address (`--gateway`);
- a project id (GOOGLE_CLOUD_PROJECT) and a placeholder credentials file
  (GOOGLE_APPLICATION_CREDENTIALS), so that `google.auth.default()` answers without a Google
  account; the clients never use these credentials against the gateway, and if any code tried,
  it would fail for want of a reachable token endpoint rather than succeed by accident;
- a REST endpoint: with PUBSUB_EMULATOR_HOST set, google-cloud-pubsub cannot build its REST
  transport at all (its GAPIC client hands the REST transport a gRPC `channel` argument, a
  TypeError). A client asked for `transport="rest"` is therefore given the REST transport a user
  would build by hand: the gateway's REST address (`--gateway-rest`) over plain HTTP with
  anonymous credentials. Without `--gateway-rest` nothing is changed and such tests fail as the
  library makes them fail.

It applies expected.toml (the one list of tests expected not to pass): `deselect` entries are
removed from the run, `xfail` entries are marked expected to fail (with the exception type they
must fail with, when the entry names one). An `xfail` entry that passes is reported as XPASS; a
strict entry (the default) then fails the run, so the list cannot go stale. An entry that
matches no collected test is an error.

Each test's outcome and the counts go to `--conformance-results` as JSON.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import shutil
import tempfile
import time
import tomllib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
PROJECT = "conformance-project"
XPASS_STRICT = "[XPASS(strict)]"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance")
    group.addoption("--gateway", help="the gateway's gRPC address (PUBSUB_EMULATOR_HOST)")
    group.addoption("--gateway-rest", help="the gateway's REST address, for clients of transport='rest'")
    group.addoption("--conformance-expected", default=str(HERE / "expected.toml"), help="the exclusion list")
    group.addoption("--conformance-results", help="write each test's outcome and the counts here (JSON)")


@dataclass(frozen=True)
class Entry:
    """One id of expected.toml: a test, a class or a module, or one parametrization."""

    test: str
    kind: str  # "deselect" or "xfail"
    reason: str
    raises: tuple[type[BaseException], ...] | None = None
    strict: bool = True

    def matches(self, nodeid: str) -> bool:
        return nodeid == self.test or nodeid.startswith((self.test + "::", self.test + "["))


def load_expected(path: Path) -> list[Entry]:
    """Read expected.toml; refuse entries without a reason or naming unknown exceptions."""
    data = tomllib.loads(path.read_text())
    unknown = set(data) - {"deselect", "xfail"}
    if unknown:
        raise pytest.UsageError(f"{path}: unknown sections {sorted(unknown)}")
    entries: list[Entry] = []
    for kind in ("deselect", "xfail"):
        for group in data.get(kind, []):
            reason = str(group.get("reason", "")).strip()
            tests = group.get("tests", [])
            if not reason or not tests:
                raise pytest.UsageError(f"{path}: every [[{kind}]] needs `tests` and a `reason`")
            raises = None
            if "raises" in group:
                if kind != "xfail":
                    raise pytest.UsageError(f"{path}: `raises` is for [[xfail]] entries only")
                names = group["raises"] if isinstance(group["raises"], list) else [group["raises"]]
                raises = tuple(_exception(name) for name in names)
            strict = bool(group.get("strict", True))
            entries.extend(Entry(str(t), kind, reason, raises, strict) for t in tests)
    return entries


def _exception(dotted: str) -> type[BaseException]:
    module, _, name = dotted.rpartition(".")
    found = getattr(importlib.import_module(module), name, None)
    if not (isinstance(found, type) and issubclass(found, BaseException)):
        raise pytest.UsageError(f"expected.toml: {dotted} is not an exception class")
    return found


class Conformance:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.entries = load_expected(Path(config.getoption("conformance_expected")))
        self.outcomes: dict[str, str] = {}
        self.messages: dict[str, str] = {}
        self.durations: dict[str, float] = {}
        self.deselected: dict[str, str] = {}
        self.started = time.monotonic()

    def entry_for(self, nodeid: str) -> Entry | None:
        return next((e for e in self.entries if e.matches(nodeid)), None)

    # -- collection (in each pytest-xdist worker, when there are workers) -------------------
    # First, before -k or -m deselect anything: every entry must match a test of the whole suite.
    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        used: set[Entry] = set()
        keep: list[pytest.Item] = []
        dropped: list[pytest.Item] = []
        for item in items:
            hits = [e for e in self.entries if e.matches(item.nodeid)]
            if len(hits) > 1:
                raise pytest.UsageError(f"expected.toml lists {item.nodeid} more than once")
            if not hits:
                keep.append(item)
                continue
            entry = hits[0]
            used.add(entry)
            if entry.kind == "deselect":
                dropped.append(item)
                self.deselected[item.nodeid] = entry.reason
                continue
            item.add_marker(pytest.mark.xfail(reason=entry.reason, raises=entry.raises, strict=entry.strict))
            keep.append(item)
        stale = [e.test for e in self.entries if e not in used]
        if stale:
            raise pytest.UsageError(f"expected.toml names tests that were not collected: {stale}")
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = keep

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:  # a pytest-xdist worker: its deselections go to the controller
            workeroutput["conformance_deselected"] = self.deselected

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        self.deselected.update(getattr(node, "workeroutput", {}).get("conformance_deselected", {}))

    # -- outcomes (reported to the controller, when there are workers) ----------------------
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        nodeid = report.nodeid
        self.durations[nodeid] = self.durations.get(nodeid, 0.0) + report.duration
        wasxfail = hasattr(report, "wasxfail")
        if report.when == "call" or (report.when == "setup" and not report.passed):
            if report.passed:
                outcome = "xpassed" if wasxfail else "passed"
            elif report.skipped:
                outcome = "xfailed" if wasxfail else "skipped"
            elif str(report.longrepr).startswith(XPASS_STRICT):
                outcome = "xpassed"
            else:
                outcome = "error" if report.when == "setup" else "failed"
            self.outcomes[nodeid] = outcome
            if outcome in ("failed", "error"):
                self.messages[nodeid] = _summary(report)
            elif outcome == "skipped":
                self.messages[nodeid] = _skip_reason(report)
        elif report.when == "teardown" and report.failed and self.outcomes.get(nodeid) == "passed":
            self.outcomes[nodeid] = "error"
            self.messages[nodeid] = "teardown: " + _summary(report)

    def counts(self) -> dict[str, int]:
        """Outcomes counted; `failing` is what fails the run: failures, errors and strict XPASSes."""
        tally = Counter(self.outcomes.values())
        keys = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
        strict_xpasses = sum(
            1
            for nodeid, outcome in self.outcomes.items()
            if outcome == "xpassed" and (entry := self.entry_for(nodeid)) is not None and entry.strict
        )
        failing = tally["failed"] + tally["error"] + strict_xpasses
        return {**{k: tally.get(k, 0) for k in keys}, "deselected": len(self.deselected), "failing": failing}

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if hasattr(self.config, "workerinput"):
            return
        xpassed = [n for n, o in self.outcomes.items() if o == "xpassed"]
        if xpassed:
            terminalreporter.section("conformance: listed as expected to fail, but passed")
            for nodeid in xpassed:
                entry = self.entry_for(nodeid)
                strict = "strict: fails the run" if entry is None or entry.strict else "not strict"
                terminalreporter.write_line(f"XPASS {nodeid} ({strict}): remove it from expected.toml")
        results = self.config.getoption("conformance_results")
        if results:
            self.write(Path(results))

    def write(self, path: Path) -> None:
        tests = []
        for nodeid, outcome in self.outcomes.items():
            row: dict[str, Any] = {
                "test": nodeid,
                "outcome": outcome,
                "seconds": round(self.durations.get(nodeid, 0.0), 2),
            }
            entry = self.entry_for(nodeid)
            if entry is not None:
                row["expected"] = entry.reason
            if nodeid in self.messages:
                row["message"] = self.messages[nodeid]
            tests.append(row)
        tests += [
            {"test": nodeid, "outcome": "deselected", "expected": reason}
            for nodeid, reason in self.deselected.items()
        ]
        path.parent.mkdir(parents=True, exist_ok=True)
        document = {
            "counts": self.counts(),
            "pytest_seconds": round(time.monotonic() - self.started, 1),
            "tests": tests,
        }
        path.write_text(json.dumps(document, indent=2) + "\n")


def _summary(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    return text.strip().splitlines()[0][:500] if text.strip() else ""


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


# -- the environment --------------------------------------------------------------------------
def pytest_configure(config: pytest.Config) -> None:
    grpc_address = config.getoption("gateway") or os.environ.get("PUBSUB_EMULATOR_HOST")
    if not grpc_address:
        raise pytest.UsageError("conformance needs --gateway HOST:PORT (or PUBSUB_EMULATOR_HOST)")
    os.environ["PUBSUB_EMULATOR_HOST"] = grpc_address
    os.environ["GOOGLE_CLOUD_PROJECT"] = PROJECT
    os.environ["GCLOUD_PROJECT"] = PROJECT
    os.environ["GOOGLE_APPLICATION_CREDENTIALS"] = str(_placeholder_credentials(config))
    rest_address = config.getoption("gateway_rest")
    if rest_address:
        _serve_rest_clients_from(rest_address)
    config.pluginmanager.register(Conformance(config), "conformance-expectations")


def _placeholder_credentials(config: pytest.Config) -> Path:
    """An authorized-user credentials file whose secrets are not secrets: enough for google.auth."""
    folder = Path(tempfile.mkdtemp(prefix="conformance-"))
    config.add_cleanup(functools.partial(shutil.rmtree, folder, ignore_errors=True))
    placeholder = {
        "type": "authorized_user",
        "client_id": "conformance-placeholder.apps.googleusercontent.com",
        "client_secret": "not-a-secret",
        "refresh_token": "not-a-token",
    }
    path = folder / "placeholder-credentials.json"
    path.write_text(json.dumps(placeholder))
    return path


def _serve_rest_clients_from(rest_address: str) -> None:
    """Clients constructed with transport="rest" get a REST transport to the gateway's REST port."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import pubsub_v1  # type: ignore[import-untyped]
    from google.pubsub_v1.services.publisher.transports.rest import PublisherRestTransport
    from google.pubsub_v1.services.subscriber.transports.rest import SubscriberRestTransport

    def patch(client: type[Any], transport_class: Callable[..., Any]) -> None:
        original = client.__init__

        @functools.wraps(original)
        def init(self: Any, *args: Any, **kwargs: Any) -> None:
            if kwargs.get("transport") == "rest":
                anonymous = AnonymousCredentials()  # type: ignore[no-untyped-call]
                kwargs["transport"] = transport_class(host=f"http://{rest_address}", credentials=anonymous)
            original(self, *args, **kwargs)

        client.__init__ = init

    patch(pubsub_v1.PublisherClient, PublisherRestTransport)
    patch(pubsub_v1.SubscriberClient, SubscriberRestTransport)
