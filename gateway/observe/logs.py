"""How the process logs: lines of text (the default) or JSON lines (`--log-format json`).

A JSON line is one object: `time` (UTC, ISO 8601 with milliseconds), `level`, `logger`,
`message` (its arguments applied), and `exception` (the formatted traceback) when there is one;
`thread` when it is not the main thread's, as librdkafka's and the pumps' lines are.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import Any, TextIO

TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
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
        return json.dumps(line, ensure_ascii=False, default=str)


def configure(level: str, log_format: str, stream: TextIO | None = None) -> None:
    """Configure the root logger once (what logging.basicConfig does), in the format chosen."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler])
