"""OpenTelemetry spans for publish and delivery (`--tracing`; docs/metrics.md, "Tracing").

The official clients, with their tracing on, carry each message's trace context in its
attributes: W3C `traceparent` (and `tracestate`) under the prefix `googclient_`. The gateway
makes one span per Publish call (`publish <topic>`) and one per batch of messages it hands out
(`deliver <subscription>`: a Pull response, a StreamingPull response), each linked to the
context of every message in it that carries one, so a trace viewer joins the publisher's
"create" span, the gateway's spans and the subscriber's "process" span of a message.

The spans are made by the RPC wrappers of rpc.py, from the request and the response they see:
no code on the paths that publish or deliver changes, and with `--tracing off` (the default)
nothing here runs or is imported. `otlp` exports with the OTLP/gRPC exporter (its standard
OTEL_EXPORTER_OTLP_* variables say where; the `tracing` extra installs it); `log` writes each
span as a JSON object to the log at INFO (logger gateway.observe.tracing), for a look without
a collector.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger(__name__)
PREFIX = "googclient_"  # the official clients' attribute prefix for propagated context
PUBLISH = "/google.pubsub.v1.Publisher/Publish"
PULL = "/google.pubsub.v1.Subscriber/Pull"
STREAMING_PULL = "/google.pubsub.v1.Subscriber/StreamingPull"
MAX_LINKS = 128  # OpenTelemetry's default limit of links per span
_PROPAGATOR = TraceContextTextMapPropagator()


def context_of(attributes: Any) -> trace.SpanContext | None:
    """The span context a message's attributes carry (googclient_traceparent), if valid."""
    parent = attributes.get(PREFIX + "traceparent") if attributes else None
    if not parent:
        return None
    carrier = {"traceparent": parent}
    state = attributes.get(PREFIX + "tracestate")
    if state:
        carrier["tracestate"] = state
    span_context = trace.get_current_span(_PROPAGATOR.extract(carrier)).get_span_context()
    return span_context if span_context.is_valid else None


def _links(messages: Iterable[tuple[Any, str]]) -> list[Link]:
    links = []
    for attributes, message_id in messages:
        found = context_of(attributes)
        if found is not None:
            links.append(Link(found, {"messaging.message.id": message_id}))
            if len(links) == MAX_LINKS:
                break
    return links


def _ids(context: trace.SpanContext) -> dict[str, str]:
    return {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}


class _LogExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            context = span.get_span_context()
            log.info(
                "%s",
                json.dumps(
                    {
                        "span": span.name,
                        "trace_id": f"{context.trace_id:032x}" if context else None,
                        "span_id": f"{context.span_id:016x}" if context else None,
                        "kind": span.kind.name,
                        "status": span.status.status_code.name,
                        "duration_ms": ((span.end_time or 0) - (span.start_time or 0)) / 1e6,
                        "attributes": dict(span.attributes or {}),
                        "links": [
                            {
                                "trace_id": f"{lk.context.trace_id:032x}",
                                "span_id": f"{lk.context.span_id:016x}",
                            }
                            for lk in span.links
                        ],
                    },
                    default=str,
                ),
            )
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


class Tracing:
    """The spans of one gateway (a provider of its own: several gateways may share a process)."""

    def __init__(self, mode: str) -> None:
        self.provider = TracerProvider(resource=Resource.create({"service.name": "pubsub-gateway"}))
        if mode == "otlp":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[import-not-found]
                OTLPSpanExporter,
            )

            self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        else:
            self.provider.add_span_processor(SimpleSpanProcessor(_LogExporter()))
        self._tracer = self.provider.get_tracer("gateway")

    def shutdown(self) -> None:
        self.provider.shutdown()

    def unary(self, method: str, request: Any, response: Any, start_ns: int, code: str) -> None:
        """A unary call ended: Publish and Pull make spans."""
        if method == PUBLISH:
            ids = list(response.message_ids) if response is not None else []
            messages = [
                (m.attributes, ids[i] if i < len(ids) else "") for i, m in enumerate(request.messages)
            ]
            self._span(f"publish {request.topic}", request.topic, "publish", messages, start_ns, code)
        elif method == PULL and response is not None and response.received_messages:
            self._deliver(request.subscription, response, start_ns, code)

    def streamed(self, method: str, subscription: str, response: Any, start_ns: int) -> None:
        """A StreamingPull response went out: its messages were delivered."""
        if method == STREAMING_PULL and response.received_messages:
            self._deliver(subscription, response, start_ns, "OK")

    def _deliver(self, subscription: str, response: Any, start_ns: int, code: str) -> None:
        messages = [(r.message.attributes, r.message.message_id) for r in response.received_messages]
        self._span(f"deliver {subscription}", subscription, "deliver", messages, start_ns, code)

    def _span(
        self,
        name: str,
        destination: str,
        operation: str,
        messages: list[tuple[Any, str]],
        start_ns: int,
        code: str,
    ) -> None:
        span = self._tracer.start_span(
            name,
            kind=SpanKind.SERVER,
            start_time=start_ns,
            links=_links(messages),
            attributes={
                "messaging.system": "gcp_pubsub",
                "messaging.operation.name": operation,
                "messaging.destination.name": destination,
                "messaging.batch.message_count": len(messages),
                "rpc.grpc.status_code": code,
            },
        )
        if code != "OK":
            span.set_status(Status(StatusCode.ERROR, code))
        span.end(time.time_ns())
