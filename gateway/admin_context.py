"""What every admin command shares (gateway/admin_cli.py): the connection to the gateway, the
names it is given, and the command line's small parsers. Only the standard library is imported
at first: grpc comes with the first call.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import grpc

    from gateway.admin_output import Output

# The resources that hold IAM policies, and the collection of their names.
IAM_COLLECTIONS = {
    "topics": "topics",
    "subscriptions": "subscriptions",
    "snapshots": "snapshots",
    "schemas": "schemas",
}
_MAX_RECEIVE = 64 * 1024 * 1024  # a single message may exceed the 4 MiB pull response budget


class UsageError(Exception):
    """The command line names something it cannot: said on stderr, exit EXIT_USAGE."""


class OutputFailed(Exception):
    """stdout could not be written: said on stderr, exit EXIT_OUTPUT_FAILED."""


class Context:
    def __init__(self, args: argparse.Namespace, channel: grpc.Channel, out: Output) -> None:
        from google.iam.v1 import iam_policy_pb2_grpc

        from gateway._pb.google.pubsub.v1 import pubsub_pb2_grpc, schema_pb2_grpc

        self.args = args
        self.out = out
        self.publisher = pubsub_pb2_grpc.PublisherStub(channel)
        self.subscriber = pubsub_pb2_grpc.SubscriberStub(channel)
        self.schemas = schema_pb2_grpc.SchemaServiceStub(channel)
        self.iam = iam_policy_pb2_grpc.IAMPolicyStub(channel)  # type: ignore[no-untyped-call]
        token = read(args.token_file).strip() if args.token_file else None
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None

    def call(self, method: Callable[..., Any], request: object) -> Any:
        return method(request, timeout=self.args.timeout, metadata=self._metadata)

    def name(self, value: str, collection: str, project: str | None = None) -> str:
        """`value` in full: as given when it is, else in `project` (default --project)."""
        if value.startswith("projects/"):
            return value
        return f"projects/{project or self.project()}/{collection}/{value}"

    def project(self) -> str:
        project = self.args.project or os.environ.get("PUBSUB_PROJECT_ID")
        if not project:
            raise UsageError("give --project (or set PUBSUB_PROJECT_ID), or full resource names")
        return project

    def pages(self, method: Callable[..., Any], request: Any, field: str) -> Iterator[Any]:
        while True:
            response = self.call(method, request)
            yield from getattr(response, field)
            if not response.next_page_token:
                return
            request.page_token = response.next_page_token


def channel(args: argparse.Namespace) -> grpc.Channel:
    import grpc

    address = args.address or os.environ.get("PUBSUB_EMULATOR_HOST")
    if not address:
        raise UsageError("no gateway: give --address HOST:PORT or set PUBSUB_EMULATOR_HOST")
    options = [("grpc.max_receive_message_length", _MAX_RECEIVE)]
    if args.tls_ca_file:
        creds = grpc.ssl_channel_credentials(read(args.tls_ca_file).encode())
        return grpc.secure_channel(address, creds, options=options)
    return grpc.insecure_channel(address, options=options)


def read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None


def pairs(values: list[str], flag: str, commas: bool = False) -> dict[str, str]:
    """KEY=VALUE entries (with `commas`, each entry may hold several, comma-separated, as
    gcloud's --labels and --attribute do)."""
    entries = [e for v in values for e in v.split(",") if e] if commas else values
    pairs = {}
    for value in entries:
        key, sep, val = value.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} takes KEY=VALUE, not {value!r}")
        pairs[key] = val
    return pairs


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds(value: str, flag: str) -> int:
    """A duration as gcloud writes them (`600s`, `10m`, `1h30m`, `7d`; a bare number is
    seconds), in whole seconds."""
    import re

    text = value.strip().lower()
    if re.fullmatch(r"\d+", text):
        return int(text)
    parts = re.findall(r"(\d+)([smhd])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise UsageError(f"{flag} takes a duration such as 600s, 10m, 1h or 7d, not {value!r}")
    return sum(int(n) * _DURATION_UNITS[u] for n, u in parts)
