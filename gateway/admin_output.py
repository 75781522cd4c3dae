"""What the admin commands print (gateway/admin_cli.py): lines for people, or JSON for scripts.

JSON is the REST API's mapping of the protos (camelCase names, bytes in base64), one document per
command on stdout, except pull's: one JSON object per message and line (JSON Lines), written as
the messages arrive; a refused call is a JSON error object on stderr. Progress bars (rich) go to
stderr, so stdout stays what a script reads.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import stat
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from google.protobuf import json_format
from google.protobuf.message import Message

if TYPE_CHECKING:
    import grpc

    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb


class Output:
    def __init__(self, fmt: str, progress: bool | None) -> None:
        self.json = fmt == "json"
        self._progress = progress

    def _print(self, value: object) -> None:
        if self.json:
            print(json.dumps(value, ensure_ascii=False, indent=2))
        else:
            print(value)

    def resources(self, found: list[Any]) -> None:
        if self.json:
            self._print([_dict(r) for r in found])
        else:
            for r in found:
                print(r.name)

    def resource(self, found: Message, *, created: bool = False) -> None:
        if self.json:
            self._print(_dict(found))
        elif created:
            print(f"created {found.name}")  # type: ignore[attr-defined]
        else:
            for key, value in _dict(found).items():
                print(f"{key}: {value if isinstance(value, str) else json.dumps(value)}")

    def done(self, text: str, doc: object) -> None:
        """A command's result: `text` for people, `doc` as JSON."""
        self._print(doc if self.json else text)

    def deleted(self, name: str) -> None:
        self._print({"name": name, "deleted": True} if self.json else f"deleted {name}")

    def published(self, topic: str, ids: list[str]) -> None:
        if self.json:
            self._print({"topic": topic, "messageIds": ids})
        else:
            for message_id in ids:
                print(message_id)

    def messages(self, received: list[pb.ReceivedMessage]) -> None:
        """A batch as it arrives, and on its way to the disk before this returns: flushed, and
        synced when stdout is a file, so that what pull acknowledges next is written. OSError
        (a closed pipe, a full disk) when it cannot be."""
        if not received:
            return
        out = sys.stdout
        for m in received:
            out.write((json.dumps(_dict(m), ensure_ascii=False) if self.json else _line(m)) + "\n")
        out.flush()
        fd = _regular_file(out)
        if fd is not None:
            os.fsync(fd)

    def pulled(self, subscription: str, received: list[pb.ReceivedMessage]) -> None:
        if not received and not self.json:
            print(f"no messages in {subscription}", file=sys.stderr)

    def sought(self, subscription: str, target: str) -> None:
        self._print(
            {"subscription": subscription, "target": target}
            if self.json
            else f"{subscription} sought to {target}"
        )

    def error(self, exc: grpc.RpcError) -> None:
        code = exc.code() if callable(getattr(exc, "code", None)) else None  # type: ignore[attr-defined]
        details = exc.details() if callable(getattr(exc, "details", None)) else str(exc)  # type: ignore[attr-defined]
        status = code.name if code is not None else "UNKNOWN"
        if self.json:
            number = code.value[0] if code is not None else 2
            error = {"error": {"code": number, "status": status, "message": details}}
            print(json.dumps(error, ensure_ascii=False), file=sys.stderr)
        else:
            print(f"pubsub-gateway: {status}: {details}", file=sys.stderr)

    @contextlib.contextmanager
    def progress(self, description: str, *, long: bool) -> Iterator[Callable[[int], None]]:
        """`advance(n)` counts n more messages; a bar is shown for long work on a terminal's
        stderr, or whenever --progress asks."""
        show = long and (self._progress if self._progress is not None else sys.stderr.isatty())
        if not show:
            yield lambda n: None
            return
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        columns = (
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TextColumn("{task.completed} messages"),
            TimeElapsedColumn(),
        )
        console = Console(stderr=True, force_terminal=True if self._progress else None)
        # Progress would send what is printed meanwhile (stdout: the messages) to its console.
        with Progress(*columns, console=console, redirect_stdout=False, redirect_stderr=False) as bar:
            task = bar.add_task(description, total=None)
            yield lambda n: bar.advance(task, n)


def _regular_file(stream: Any) -> int | None:
    """The descriptor of `stream` when it is a regular file (a pipe or a terminal has no disk to
    sync to), else None."""
    try:
        fd: int = stream.fileno()
        return fd if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except (AttributeError, ValueError, OSError):
        return None


def _dict(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(message)


def _line(m: pb.ReceivedMessage) -> str:
    """`<message id>  <publish time>  <data>  [key=...]  [k=v ...]`: data as a JSON string when
    it is UTF-8, else `base64:...`."""
    msg = m.message
    try:
        data = json.dumps(msg.data.decode("utf-8"), ensure_ascii=False)
    except UnicodeDecodeError:
        data = "base64:" + base64.b64encode(msg.data).decode()
    parts = [msg.message_id, msg.publish_time.ToJsonString(), data]
    if msg.ordering_key:
        parts.append(f"key={json.dumps(msg.ordering_key, ensure_ascii=False)}")
    parts.extend(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in sorted(msg.attributes.items()))
    if m.delivery_attempt:
        parts.append(f"attempt={m.delivery_attempt}")
    return "  ".join(parts)
