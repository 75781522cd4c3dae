"""Per-call metrics of both wires: a gRPC server interceptor and a wrapper around the servicer
methods REST calls. Neither needs anything of the services: every RPC of any service the gRPC
server serves, those added later included, is counted by its full method name and status code.

One histogram, `pubsub_gateway_rpc_duration_seconds{transport, method, code}`: its `_count` is
the number of calls. A streaming call is observed once, when it ends (its duration is the
stream's life).
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any, Protocol

import grpc
from prometheus_client import CollectorRegistry, Histogram

from gateway.wire.rest import Aborted

log = logging.getLogger(__name__)
# From a fast Acknowledge (~1 ms) to a Pull waiting its full time and a stream's half hour.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)


class RpcMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.duration = Histogram(
            "pubsub_gateway_rpc_duration_seconds",
            "Calls answered, by wire, full method name and status code (_count: how many).",
            ["transport", "method", "code"],
            buckets=BUCKETS,
            registry=registry,
        )
        self._children: dict[tuple[str, str, str], Any] = {}

    def observe(self, transport: str, method: str, code: str, seconds: float) -> None:
        key = (transport, method, code)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.duration.labels(transport, method, code)
        child.observe(seconds)


def _code(context: grpc.aio.ServicerContext[Any, Any], error: BaseException | None) -> str:
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code.name
    if isinstance(code, int):  # some grpcio versions give the number
        for status in grpc.StatusCode:
            if status.value[0] == code:
                return status.name
    if error is None:
        return "OK"
    return (
        "CANCELLED"
        if isinstance(error, BaseException) and type(error).__name__ == "CancelledError"
        else "UNKNOWN"
    )


if TYPE_CHECKING:  # generic in the stubs only
    Handler = grpc.RpcMethodHandler[Any, Any]


class Spans(Protocol):
    """What makes spans of calls (tracing.Tracing), when tracing is on."""

    def unary(self, method: str, request: Any, response: Any, start_ns: int, code: str) -> None: ...

    def streamed(self, method: str, subscription: str, response: Any, start_ns: int) -> None: ...


STREAMING_PULL = "/google.pubsub.v1.Subscriber/StreamingPull"


class Interceptor(grpc.aio.ServerInterceptor):
    """Wraps each method's handler so that its end is observed with its status (and, with
    `spans`, that spans are made of what it received and answered)."""

    def __init__(self, metrics: RpcMetrics, spans: Spans | None = None) -> None:
        self._metrics = metrics
        self._spans = spans
        self._wrapped: dict[str, tuple[Handler, Handler]] = {}  # method -> (its handler, wrapped)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler  # an unknown method: grpc answers UNIMPLEMENTED itself
        method: str = handler_call_details.method  # type: ignore[attr-defined]
        cached = self._wrapped.get(method)
        if cached is None or cached[0] is not handler:  # wrapped once per method, not per call
            cached = self._wrapped[method] = (handler, self._wrap(handler, method))
        return cached[1]

    def _wrap(self, handler: Handler, method: str) -> Handler:
        observe = self._metrics.observe
        kinds = (
            ("unary_unary", grpc.unary_unary_rpc_method_handler),
            ("unary_stream", grpc.unary_stream_rpc_method_handler),
            ("stream_unary", grpc.stream_unary_rpc_method_handler),
            ("stream_stream", grpc.stream_stream_rpc_method_handler),
        )
        for attribute, make in kinds:
            behavior = getattr(handler, attribute)
            if behavior is None:
                continue
            # A streaming handler is an async generator, or a coroutine writing with context.write.
            generator = inspect.isasyncgenfunction(behavior)
            wrapped = (
                _timed_stream(behavior, method, observe, self._spans)
                if generator
                else _timed(behavior, method, observe, self._spans)
            )
            return make(  # type: ignore[no-any-return]
                wrapped,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler


Observe = Callable[[str, str, str, float], None]


def _timed(behavior: Any, method: str, observe: Observe, spans: Spans | None) -> Any:
    async def call(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        start = time.perf_counter()
        start_ns = time.time_ns() if spans is not None else 0
        error: BaseException | None = None
        result = None
        try:
            pending = behavior(request, context)
            result = (await pending) if inspect.isawaitable(pending) else pending
            return result
        except BaseException as exc:
            error = exc
            raise
        finally:
            code = _code(context, error)
            observe("grpc", method, code, time.perf_counter() - start)
            if spans is not None:
                _span(spans, method, request, result, start_ns, code)

    return call


def _span(spans: Spans, method: str, request: Any, response: Any, start_ns: int, code: str) -> None:
    try:
        spans.unary(method, request, response, start_ns, code)
    except Exception:
        log.debug("no span for %s", method, exc_info=True)


def _timed_stream(behavior: Any, method: str, observe: Observe, spans: Spans | None) -> Any:
    async def call(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        start = time.perf_counter()
        error: BaseException | None = None
        traced = spans is not None and method == STREAMING_PULL
        subscription = [""]
        if traced:
            request = _first_subscription(request, subscription)
        try:
            async for response in behavior(request, context):
                if traced:
                    try:
                        spans.streamed(method, subscription[0], response, time.time_ns())  # type: ignore[union-attr]
                    except Exception:
                        log.debug("no span for %s", method, exc_info=True)
                yield response
        except BaseException as exc:
            error = exc
            raise
        finally:
            observe("grpc", method, _code(context, error), time.perf_counter() - start)

    return call


async def _first_subscription(requests: AsyncIterator[Any], into: list[str]) -> AsyncIterator[Any]:
    """The requests of a stream, as they come; the first one's subscription noted in `into`."""
    async for item in requests:
        if not into[0]:
            into[0] = str(getattr(item, "subscription", "") or "")
        yield item


def wrap_rest_calls(calls: MutableMapping[str, Any], metrics: RpcMetrics, spans: Spans | None = None) -> None:
    """Time the servicer methods REST calls (RestApi.calls, by route name). The method label
    is the gRPC one (/service/Method), so that both wires' calls of a method line up."""
    for name, call in list(calls.items()):
        calls[name] = _timed_rest(call, _grpc_name(name, call), metrics.observe, spans)


def _grpc_name(route: str, call: Any) -> str:
    service = getattr(getattr(call, "__self__", None), "SERVICE", None)
    method = getattr(call, "__name__", None)
    if isinstance(service, str) and isinstance(method, str):
        return f"/{service}/{method}"
    return route


def _timed_rest(call: Any, method: str, observe: Observe, spans: Spans | None) -> Any:
    async def timed(request: Any, context: Any) -> Any:
        start = time.perf_counter()
        start_ns = time.time_ns() if spans is not None else 0
        code = "UNKNOWN"
        result = None
        try:
            pending = call(request, context)
            result = (await pending) if inspect.isawaitable(pending) else pending
            status = getattr(context, "code", None)
            code = "OK" if status is None else status.name
            return result
        except Aborted as err:
            code = err.code.name
            raise
        except NotImplementedError:
            code = "UNIMPLEMENTED"
            raise
        finally:
            observe("rest", method, code, time.perf_counter() - start)
            if spans is not None:
                _span(spans, method, request, result, start_ns, code)

    return timed
