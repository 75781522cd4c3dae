"""The core's one exception hierarchy.

Each class carries the canonical status it maps to; the wire layers (gRPC, REST) turn that
status into their own form. The core never builds a gRPC status or an HTTP response.
Codes follow the retry table of the official clients: a transient Kafka failure is
UNAVAILABLE (retried everywhere), bad input INVALID_ARGUMENT, a missing resource NOT_FOUND.
"""

from __future__ import annotations

import enum

# Error messages travel in gRPC's `grpc-message` header (percent-encoded: up to 3 bytes per byte)
# and clients drop responses whose metadata passes 8-16 KiB. A value a message quotes is cut
# to QUOTE_CHARS characters (more than the longest well-formed resource name, 379, so names a
# little too long still come back whole) and QUOTE_BYTES of UTF-8; a whole message to
# MAX_MESSAGE_BYTES, whatever it holds.
QUOTE_CHARS, QUOTE_BYTES = 400, 600
MAX_MESSAGE_BYTES = 1024
ELLIPSIS = "\u2026"


class CannotListen(OSError):
    """A port or socket the gateway must listen on is taken or refused: `pubsub-gateway serve`
    says so in one line and exits 1 (not a core error: no status of the API)."""


def quote(value: object, limit: int = QUOTE_CHARS) -> str:
    """`value` as text for an error message: its first `limit` characters, and `…` with its
    length when it is longer (a 1 MB resource name must not come back whole)."""
    text = str(value)
    head = text[:limit].encode("utf-8", "replace")[:QUOTE_BYTES].decode("utf-8", "ignore")
    if head == text:
        return text
    return f"{head}{ELLIPSIS} ({len(text)} characters)"


def bounded(message: str, limit: int = MAX_MESSAGE_BYTES) -> str:
    """`message`, cut to at most `limit` bytes of UTF-8 (and `…`) at a character boundary;
    lone surrogates, which no wire can encode, become `?`."""
    data = message.encode("utf-8", "replace")
    if len(data) <= limit:
        return data.decode("utf-8")
    return data[: limit - len(ELLIPSIS.encode())].decode("utf-8", "ignore") + ELLIPSIS


class Code(enum.Enum):
    """google.rpc.Code, with the HTTP status Google APIs pair with each."""

    OK = (0, 200)
    CANCELLED = (1, 499)
    UNKNOWN = (2, 500)
    INVALID_ARGUMENT = (3, 400)
    DEADLINE_EXCEEDED = (4, 504)
    NOT_FOUND = (5, 404)
    ALREADY_EXISTS = (6, 409)
    PERMISSION_DENIED = (7, 403)
    RESOURCE_EXHAUSTED = (8, 429)
    FAILED_PRECONDITION = (9, 400)
    ABORTED = (10, 409)
    OUT_OF_RANGE = (11, 400)
    UNIMPLEMENTED = (12, 501)
    INTERNAL = (13, 500)
    UNAVAILABLE = (14, 503)
    DATA_LOSS = (15, 500)
    UNAUTHENTICATED = (16, 401)

    @property
    def number(self) -> int:
        return self.value[0]

    @property
    def http_status(self) -> int:
        return self.value[1]


class GatewayError(Exception):
    """Base of every error the core raises on purpose. Its message is `bounded`: whatever a
    path quotes into it, no error can carry an unbounded value to a client."""

    code: Code = Code.INTERNAL

    def __init__(self, message: str) -> None:
        message = bounded(message)
        super().__init__(message)
        self.message = message


class InvalidArgument(GatewayError):
    code = Code.INVALID_ARGUMENT


class AckIdsFailed(InvalidArgument):
    """Exactly-once delivery: some ack ids failed. `failures` maps each listed id to its reason
    (`PERMANENT_FAILURE_INVALID_ACK_ID` or `TRANSIENT_FAILURE_...`), as the clients expect in the
    ErrorInfo of the status details."""

    def __init__(self, message: str, failures: dict[str, str], retry_rest: bool = False) -> None:
        """`retry_rest`: not every id could be listed; the call fails with ABORTED, which the
        official subscribers retry for the ids not listed (and which the generated clients do
        not retry whole, as they would UNAVAILABLE)."""
        super().__init__(message)
        self.failures = failures
        if retry_rest:
            self.code = Code.ABORTED


class NotFound(GatewayError):
    code = Code.NOT_FOUND


class AlreadyExists(GatewayError):
    code = Code.ALREADY_EXISTS


class FailedPrecondition(GatewayError):
    code = Code.FAILED_PRECONDITION


class PermissionDenied(GatewayError):
    """The caller lacks an IAM permission, or Kafka's authorizer refused the gateway's own
    principal something it needs."""

    code = Code.PERMISSION_DENIED


class Aborted(GatewayError):
    """A read-modify-write lost to a concurrent change (an IAM policy's etag): read again."""

    code = Code.ABORTED


class Unauthenticated(GatewayError):
    """Authentication is on and the call carries no valid credentials."""

    code = Code.UNAUTHENTICATED


class Unavailable(GatewayError):
    """Transient: Kafka unreachable, a write not confirmed in time. Clients retry."""

    code = Code.UNAVAILABLE


class Unimplemented(GatewayError):
    code = Code.UNIMPLEMENTED


class ResourceExhausted(GatewayError):
    code = Code.RESOURCE_EXHAUSTED


class Internal(GatewayError):
    code = Code.INTERNAL
