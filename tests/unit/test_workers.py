"""`serve --workers N` without a broker: its setting, the supervisor's pure parts, the ports it
holds, the workers' log lines (gateway.workers, gateway.observe.logs)."""

from __future__ import annotations

import io
import json
import logging
import pickle
import signal
import socket

import pytest

from gateway import cli, workers
from gateway.observe import logs
from gateway.settings import MAX_WORKERS, Settings, SettingsError
from gateway.wire.connections import grpc_options
from tests.unit.test_settings import parse


def test_one_worker_by_default() -> None:
    s = parse([])
    assert s.workers == 1
    assert s.worker_max_restarts == 5
    assert ("grpc.so_reuseport", 0) in grpc_options(s)  # the port is this process's alone


@pytest.mark.parametrize("value", [1, 2, MAX_WORKERS])
def test_workers_in_range(value: int) -> None:
    assert parse(["--workers", str(value)]).workers == value
    assert parse([], {"PUBSUB_GATEWAY_WORKERS": str(value)}).workers == value


@pytest.mark.parametrize("value", [0, -1, MAX_WORKERS + 1, 1000])
def test_workers_out_of_range_are_refused(value: int) -> None:
    with pytest.raises(SettingsError, match=rf"--workers must be 1\.\.{MAX_WORKERS}, got {value}"):
        parse(["--workers", str(value)])
    with pytest.raises(SettingsError, match="--workers"):
        parse([], {"PUBSUB_GATEWAY_WORKERS": str(value)})


@pytest.mark.parametrize("value", [-1, 101])
def test_worker_max_restarts_out_of_range_is_refused(value: int) -> None:
    with pytest.raises(SettingsError, match=r"--worker-max-restarts must be 0\.\.100"):
        parse(["--worker-max-restarts", str(value)])


def test_worker_ports() -> None:
    assert parse(["--workers", "4", "--worker-ports-from", "9000"]).worker_ports_from == 9000
    assert parse(["--workers", "2", "--worker-ports-from", "65534"]).worker_ports_from == 65534
    with pytest.raises(SettingsError, match=r"ports up to 65536 must be 1\.\.65535"):
        parse(["--workers", "2", "--worker-ports-from", "65535"])
    with pytest.raises(SettingsError, match="--worker-ports-from -1"):
        parse(["--workers", "2", "--worker-ports-from", "-1"])
    with pytest.raises(SettingsError, match="applies with --workers above 1"):
        parse(["--worker-ports-from", "9000"])


def test_the_command_refuses_bad_workers_before_starting_anything(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["serve", "--workers", "0"], ["serve", "--workers", "65"], ["serve", "--workers", "two"]):
        with pytest.raises(SystemExit) as exit_info:
            cli.main(argv)
        assert exit_info.value.code == 2
        assert "--workers" in capsys.readouterr().err


def test_workers_need_linux(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gateway.settings.sys.platform", "darwin")
    with pytest.raises(SettingsError, match="needs Linux"):
        Settings(workers=2).validate()
    assert Settings(workers=1).validate().workers == 1


def test_settings_reach_the_workers_whole() -> None:
    """The supervisor pickles them to each worker: every field survives, secrets included."""
    s = parse(["--workers", "3", "--kafka-config", "sasl.password=s3cret", "--rest-port", "0"])
    assert pickle.loads(pickle.dumps(s)) == s


def test_deaths_within_the_window() -> None:
    now = [0.0]
    deaths = workers.Deaths(2, window=300.0, clock=lambda: now[0])
    assert deaths.record()
    now[0] = 10.0
    assert deaths.record()
    now[0] = 20.0
    assert not deaths.record()  # a third death within 5 minutes: give up
    now[0] = 400.0
    assert deaths.record()  # the old ones have left the window
    assert deaths.recent == 1
    assert not workers.Deaths(0).record()  # 0: the first death is fatal


def test_describe_exit() -> None:
    assert workers.describe_exit(-signal.SIGKILL) == "killed by SIGKILL"
    assert workers.describe_exit(1) == "exit status 1"
    assert workers.describe_exit(-999) == "exit status -999"


def test_reserved_port_is_shared_by_reuse_port_only() -> None:
    held = workers.reserve_port("127.0.0.1", 0)
    try:
        port = held.getsockname()[1]
        assert port != 0
        worker = socket.socket()  # what a worker's listener does: SO_REUSEPORT, then listen
        worker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        worker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        worker.bind(("127.0.0.1", port))
        worker.listen()
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # the worker's listener gets it, not the held socket
        with worker.accept()[0]:
            pass
        worker.close()
        stranger = socket.socket()  # a process without SO_REUSEPORT cannot take the port
        with pytest.raises(OSError, match="in use"):
            stranger.bind(("127.0.0.1", port))
        stranger.close()
    finally:
        held.close()


def test_reserving_a_port_in_use_says_which() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}"):
            workers.reserve_port("127.0.0.1", port)


def test_a_port_another_reuse_port_process_listens_on_is_refused() -> None:
    """SO_REUSEPORT alone would let a second `--workers` gateway of this user share the port."""
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        with pytest.raises(OSError, match="another process listens there"):
            workers.reserve_port("127.0.0.1", port)


def test_worker_log_lines_carry_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", root.level)  # restored after the test, as the handlers are
    out = io.StringIO()
    logs.configure("INFO", "text", out, 2)
    logging.getLogger("gateway.test").info("hello")
    assert "INFO    [worker 2] gateway.test: hello" in out.getvalue()

    record = logging.LogRecord("gateway.test", logging.INFO, __file__, 1, "hi", None, None)
    assert json.loads(logs.JsonFormatter(3).format(record))["worker"] == 3
    assert json.loads(logs.JsonFormatter(logs.SUPERVISOR).format(record))["worker"] == "supervisor"
    assert "worker" not in json.loads(logs.JsonFormatter().format(record))


def test_workers_share_their_grpc_port() -> None:
    assert ("grpc.so_reuseport", 1) in grpc_options(Settings(workers=2), reuse_port=True)
