"""The REST/JSON wire: every `google.api.http` binding of Publisher, Subscriber and
SchemaService (and IAMPolicy's, as Pub/Sub binds them), on aiohttp.

Routes come from the protos (rest_routes.py); each request becomes the RPC's request proto
(rest_json.py) and goes to the very servicer method the gRPC wire calls, with a small context
whose `abort` raises. Errors leave as Google APIs send them:
`{"error": {"code": 404, "message": "...", "status": "NOT_FOUND"}}` with that HTTP status.
The OpenAPI document of the same routes is served at /v1/openapi.json.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NoReturn

import grpc
from aiohttp import hdrs, web
from aiohttp.http_exceptions import HttpProcessingError
from google.iam.v1 import iam_policy_pb2
from google.protobuf import json_format
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import Message
from google.rpc import (
    error_details_pb2,  # noqa: F401  (registers ErrorInfo for error details)
    status_pb2,
)

from gateway._pb.google.pubsub.v1 import pubsub_pb2, schema_pb2
from gateway.errors import Code
from gateway.wire import openapi, received, rest_json, rest_routes
from gateway.wire.access import Context
from gateway.wire.http_guard import ConnectionGuard
from gateway.wire.peers import DETAILS_KEY

log = logging.getLogger(__name__)
OPENAPI_PATH = "/v1/openapi.json"
SERVICES = ("Publisher", "Subscriber")
IAM_SERVICE: ServiceDescriptor = iam_policy_pb2.DESCRIPTOR.services_by_name["IAMPolicy"]

# A servicer method (grpc_api), or a generated base class's stub of a method not served, which
# raises NotImplementedError without awaiting anything.
Call = Callable[[Message, Context], Awaitable[Message] | Message]


@dataclasses.dataclass(frozen=True, slots=True)
class HttpLimits:
    """The REST port's connection limits (the --http-* settings; docs/connections.md)."""

    max_connections: int
    header_timeout: float
    body_timeout: float
    idle_timeout: float


# How long aiohttp goes on reading (and dropping) a body the API answered without reading it
# all, so that the client sees the answer rather than a reset connection.
LINGER_SECONDS = 2.0


class BodyTimeout(Exception):
    """The request body did not arrive in time: 408, and the connection is closed."""


class Aborted(Exception):
    """A servicer ended the call with a status (what grpc's `context.abort` does)."""

    def __init__(self, code: Code, message: str, details: Sequence[dict[str, Any]] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = list(details)


def _details(metadata: Sequence[tuple[str, str | bytes]]) -> list[dict[str, Any]]:
    """The google.rpc.Status details a servicer attached (e.g. exactly-once ErrorInfo), as JSON."""
    for key, value in metadata:
        if key == DETAILS_KEY and isinstance(value, bytes):
            status = status_pb2.Status.FromString(value)
            try:
                return [json_format.MessageToDict(d) for d in status.details]
            except (TypeError, KeyError, json_format.Error):
                log.warning("dropping error details of unknown type")
    return []


class CallContext:
    """The part of grpc.aio.ServicerContext the servicers use, for one HTTP request. Its only
    metadata is the request's `authorization` header: no other header reaches the servicers
    (the peer mark of forwarded calls, above all, cannot come over REST)."""

    def __init__(self, authorization: str | None = None, certificate: bytes | None = None) -> None:
        self.code: grpc.StatusCode | None = None
        self.details = ""
        self._trailing: Sequence[tuple[str, str | bytes]] = ()
        self._metadata = () if authorization is None else (("authorization", authorization),)
        self._certificate = certificate

    async def abort(
        self,
        code: grpc.StatusCode,
        details: str = "",
        trailing_metadata: Sequence[tuple[str, str | bytes]] = (),
    ) -> NoReturn:
        metadata = list(trailing_metadata or ()) + list(self._trailing)
        raise Aborted(Code[code.name], details, _details(metadata))

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details

    def set_trailing_metadata(self, metadata: Sequence[tuple[str, str | bytes]]) -> None:
        self._trailing = metadata

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def peer_certificate(self) -> bytes | None:
        """The client certificate TLS verified for this connection (DER), if any."""
        return self._certificate

    def time_remaining(self) -> float | None:
        return None

    def peer(self) -> str:
        return "rest"


async def invoke(call: Call, request: Message, context: CallContext | None = None) -> Message:
    """Run one servicer method as the gRPC server would, turning its status into `Aborted`."""
    context = context or CallContext()
    try:
        result = call(request, context)
        if inspect.isawaitable(result):
            result = await result
    except NotImplementedError:  # the generated base class: set_code(UNIMPLEMENTED) + raise
        raise Aborted(Code.UNIMPLEMENTED, context.details or "Method not implemented.") from None
    if context.code is not None and context.code.name != "OK":
        raise Aborted(Code[context.code.name], context.details)
    if isinstance(result, received.Encoded):  # Pull: its messages are wire bytes already
        return result.message()
    return result


def error_response(
    code: Code,
    message: str,
    http_status: int | None = None,
    details: Sequence[dict[str, Any]] = (),
    headers: Mapping[str, str] | None = None,
) -> web.Response:
    status = http_status or code.http_status
    error: dict[str, Any] = {"code": status, "message": message, "status": code.name}
    if details:
        error["details"] = list(details)
    return web.Response(
        status=status,
        body=json.dumps({"error": error}).encode(),
        content_type="application/json",
        charset="utf-8",
        headers=headers,
    )


def route_error(err: rest_routes.NoRoute) -> web.Response:
    """404 for a path no method has; 405 (with Allow) for a known path and the wrong method."""
    if not err.allowed:
        return error_response(Code.NOT_FOUND, err.message)
    return error_response(
        Code.UNIMPLEMENTED, err.message, http_status=405, headers={"Allow": ", ".join(err.allowed)}
    )


class RestApi:
    """The routes, the servicer methods they call and the OpenAPI document, for one app."""

    def __init__(self, servicers: Mapping[str, object], body_timeout: float) -> None:
        self.body_timeout = body_timeout
        services = [pubsub_pb2.DESCRIPTOR.services_by_name[name] for name in SERVICES]
        services.append(schema_pb2.DESCRIPTOR.services_by_name["SchemaService"])
        table = rest_routes.routes(services) + rest_routes.iam_routes(IAM_SERVICE)
        self.router = rest_routes.Router(table)
        self.calls: dict[str, Call] = {r.name: getattr(servicers[r.service], r.method.name) for r in table}
        self.openapi = json.dumps(openapi.document(table), indent=1).encode()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._dispatch(request)
        except rest_json.BadRequest as err:
            return error_response(Code.INVALID_ARGUMENT, err.message)
        except Aborted as err:
            return error_response(err.code, err.message, details=err.details)
        except rest_routes.NoRoute as err:
            return route_error(err)
        except BodyTimeout:
            response = error_response(
                Code.DEADLINE_EXCEEDED,
                f"The request body did not arrive within {self.body_timeout:g} s.",
                http_status=408,
            )
            response.force_close()
            return response
        except Exception:
            log.exception("%s %s failed", request.method, request.rel_url.raw_path)
            return error_response(Code.INTERNAL, "The request failed inside the gateway.")

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        raw_path = request.rel_url.raw_path
        if raw_path == OPENAPI_PATH:
            if request.method != "GET":
                raise rest_routes.NoRoute(raw_path, request.method, ("GET",))
            return web.Response(body=self.openapi, content_type="application/json", charset="utf-8")
        route, values = self.router.match(request.method, raw_path)
        query = list(request.query.items())
        out = rest_json.output_options(query)
        try:
            async with asyncio.timeout(self.body_timeout):
                body = await _read_body(request)
        except TimeoutError:
            raise BodyTimeout from None
        message = rest_json.build_request(route, values, query, body)
        context = CallContext(request.headers.get(hdrs.AUTHORIZATION), _client_certificate(request))
        result = await invoke(self.calls[route.name], message, context)
        return web.Response(
            body=rest_json.render(result, out), content_type="application/json", charset="utf-8"
        )


def _client_certificate(request: web.Request) -> bytes | None:
    """The certificate the client presented and TLS verified (DER), if any."""
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is None:
        return None
    der: bytes | None = ssl_object.getpeercert(binary_form=True)
    return der


async def _read_body(request: web.Request) -> bytes:
    """The body, decoded under its Content-Encoding: the server leaves decompression to the
    API, so the 10 MiB limit holds for the decompressed bytes too."""
    if request.content_length is not None and request.content_length > rest_json.MAX_BODY:
        raise rest_json.BadRequest(rest_json.TOO_LARGE)
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise rest_json.BadRequest(rest_json.TOO_LARGE) from None
    except web.RequestPayloadError as exc:  # e.g. malformed chunked framing
        raise rest_json.BadRequest(f"The request body cannot be read: {str(exc)[:200]}") from None
    return rest_json.decode_body(raw, request.headers.get(hdrs.CONTENT_ENCODING, ""))


API_KEY = web.AppKey("rest_api", RestApi)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _serve_api(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Routes others add to the app (the push key set) answer first; every other request is
    the API's, which routes by the HTTP rules itself."""
    error = request.match_info.http_exception
    if error is None:
        return await handler(request)
    if isinstance(error, web.HTTPMethodNotAllowed):
        allowed = tuple(sorted(error.allowed_methods))
        return route_error(rest_routes.NoRoute(request.path, request.method, allowed))
    return await request.app[API_KEY].handle(request)


def create_app(servicers: Mapping[str, object], body_timeout: float) -> web.Application:
    """The aiohttp application; `servicers` maps full service names to servicer instances.

    The API has no aiohttp routes: requests no route claims reach it through a middleware, so
    other parts of the gateway may add routes of their own to the app. It decodes request
    bodies itself: serve it with aiohttp's `auto_decompress=False`, as RestServer does."""
    app = web.Application(client_max_size=rest_json.MAX_BODY, middlewares=[_serve_api])
    app[API_KEY] = RestApi(servicers, body_timeout)
    return app


class _ClientMistakes(logging.Filter):
    """aiohttp logs a request it cannot parse (a line or header too long, a bad request line)
    at ERROR with a traceback, and answers 400. It is the client's mistake: one DEBUG line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return True
        if not server_log.isEnabledFor(logging.DEBUG):
            return False
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        record.msg = f"{record.msg} (answered 400): %s"
        record.args = (*(record.args if isinstance(record.args, tuple) else ()), exc.message)
        record.exc_info = record.exc_text = None
        return True


# The logger of aiohttp's connection handling on the REST port (RestServer passes it in).
server_log = logging.getLogger("gateway.wire.http")
server_log.addFilter(_ClientMistakes())


class RestServer:
    """The REST app behind a ConnectionGuard (connection cap, deadline on request heads);
    aiohttp closes connections idle for `limits.idle_timeout`. On a port of its own, or with
    `port=None` on none: a shared port (shared_port.py) then hands it connections through
    `guard`, the protocol factory. `stop()` closes the port, then runs aiohttp's runner cleanup,
    which ends the connections of either (idempotent). With `tls` (an SSLContext) its own port
    speaks HTTPS; a handshake must complete within the header timeout."""

    def __init__(
        self,
        app: web.Application,
        host: str,
        port: int | None,
        grace_seconds: float,
        limits: HttpLimits,
        tls: ssl.SSLContext | None = None,
        *,
        reuse_port: bool = False,
    ) -> None:
        self._app = app
        self._reuse_port = reuse_port  # the port is shared with the other workers (--workers)
        self._tls = tls
        self._host = host
        self._requested_port = port
        self._grace = grace_seconds
        self._limits = limits
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None
        self.guard: ConnectionGuard | None = None
        self.port = 0

    async def start(self) -> None:
        limits = self._limits
        guard = ConnectionGuard(limits.max_connections, limits.header_timeout)
        self._app.middlewares.insert(0, guard.middleware)  # before setup freezes the app
        runner = web.AppRunner(
            self._app,
            access_log=None,
            logger=server_log,
            shutdown_timeout=self._grace,
            keepalive_timeout=limits.idle_timeout,
            lingering_time=LINGER_SECONDS,
            auto_decompress=False,
        )
        await runner.setup()
        self._runner = runner
        assert runner.server is not None
        guard.protocol_factory = runner.server
        self.guard = guard
        if self._requested_port is None:
            return
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(
            guard,
            self._host,
            self._requested_port,
            reuse_address=True,
            reuse_port=self._reuse_port or None,
            backlog=128,
            ssl=self._tls,
            ssl_handshake_timeout=limits.header_timeout if self._tls is not None else None,
        )
        self.port = int(self._listener.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> RestServer:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
