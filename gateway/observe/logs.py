"""How the process logs: lines of text (the default) or JSON lines (`--log-format json`).

A JSON line is one object: `time` (UTC, ISO 8601 with milliseconds), `level`, `logger`,
`message` (its arguments applied), and `exception` (the formatted traceback) when there is one;
`thread` when it is not the main thread's, as librdkafka's and the pumps' lines are.

The processes of `serve --workers N` say which they are: the supervisor's lines carry
`[supervisor]`, a worker's `[worker 2]` (text) or `"worker": 2` (JSON).
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import Any, TextIO

TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
SUPERVISOR = 0  # the `worker` of the supervisor's own lines


def _process_name(worker: int) -> str:
    return "supervisor" if worker == SUPERVISOR else f"worker {worker}"


class JsonFormatter(logging.Formatter):
    def __init__(self, worker: int | None = None) -> None:
        super().__init__()
        self._worker = worker

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC)
        line: dict[str, Any] = {
            "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        if record.threadName and record.threadName != "MainThread":
            line["thread"] = record.threadName
        if self._worker is not None:
            line["worker"] = _process_name(self._worker) if self._worker == SUPERVISOR else self._worker
        return json.dumps(line, ensure_ascii=False, default=str)


def configure(level: str, log_format: str, stream: TextIO | None = None, worker: int | None = None) -> None:
    """Configure the root logger once (what logging.basicConfig does), in the format chosen;
    `worker` marks every line of a process of `serve --workers N` (SUPERVISOR: the parent)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter(worker))
    else:
        text = TEXT_FORMAT
        if worker is not None:
            text = text.replace("%(name)s", f"[{_process_name(worker)}] %(name)s")
        handler.setFormatter(logging.Formatter(text))
    logging.basicConfig(level=level, handlers=[handler])
