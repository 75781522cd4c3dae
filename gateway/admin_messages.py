"""The admin commands on messages (gateway/admin_cli.py): publish, pull (a drain acknowledges
only what it wrote), seek."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from gateway.admin_context import Context, OutputFailed, UsageError, pairs

if TYPE_CHECKING:
    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb

# What one PublishRequest may hold (Pub/Sub's limits: 1,000 messages, 10 MB a request).
PUBLISH_BATCH_MESSAGES = 1000
PUBLISH_BATCH_BYTES = 9 * 1024 * 1024
PULL_BATCH = 1000


def publish(ctx: Context) -> int:
    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb

    a = ctx.args
    topic = ctx.name(a.topic, "topics")
    attributes = pairs(a.attribute, "--attribute")
    from_stdin = not a.messages
    data: Iterator[bytes] = (
        (line for line in (raw.rstrip(b"\n") for raw in sys.stdin.buffer) if line)  # blank lines skipped
        if from_stdin
        else (m.encode() for m in a.messages)
    )
    ids: list[str] = []
    with ctx.out.progress(f"publishing to {topic}", long=from_stdin) as advance:
        try:
            for batch in batches(data):
                messages = [
                    pb.PubsubMessage(data=d, attributes=attributes, ordering_key=a.ordering_key or "")
                    for d in batch
                ]
                response = ctx.call(ctx.publisher.Publish, pb.PublishRequest(topic=topic, messages=messages))
                ids.extend(response.message_ids)
                advance(len(batch))
        except BaseException:
            if ids:
                print(
                    f"pubsub-gateway publish: {len(ids)} messages were published before this", file=sys.stderr
                )
            raise
    ctx.out.published(topic, ids)
    return 0


def publish_one(ctx: Context) -> int:
    """`topics publish`: one message, its data from --message, --message-file (- for stdin, all
    of it) or --message-base64."""
    import base64
    import binascii

    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb

    a = ctx.args
    topic = ctx.name(a.topic, "topics")
    if a.message is not None:
        data = a.message.encode()
    elif a.message_file == "-":
        data = sys.stdin.buffer.read()
    elif a.message_file is not None:
        try:
            with open(a.message_file, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise UsageError(f"cannot read {a.message_file}: {exc.strerror}") from None
    elif a.message_base64 is not None:
        try:
            data = base64.b64decode(a.message_base64, validate=True)
        except binascii.Error:
            raise UsageError("--message-base64 is not base64") from None
    else:
        data = b""
    attributes = pairs(a.attribute, "--attribute", commas=True)
    if not data and not attributes:
        raise UsageError(
            "a message needs data (--message, --message-file, --message-base64) or an --attribute"
        )
    message = pb.PubsubMessage(data=data, attributes=attributes, ordering_key=a.ordering_key or "")
    response = ctx.call(ctx.publisher.Publish, pb.PublishRequest(topic=topic, messages=[message]))
    ctx.out.published(topic, list(response.message_ids))
    return 0


def batches(data: Iterator[bytes]) -> Iterator[list[bytes]]:
    batch: list[bytes] = []
    size = 0
    for item in data:
        if batch and (len(batch) == PUBLISH_BATCH_MESSAGES or size + len(item) > PUBLISH_BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(item)
        size += len(item)
    if batch:
        yield batch


def pull(ctx: Context) -> int:
    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb

    a = ctx.args
    subscription = ctx.name(a.subscription, "subscriptions")
    limit = a.max if a.max is not None else (None if a.all else getattr(a, "default_limit", 10))
    if limit is not None and limit < 1:
        raise UsageError("--max must be at least 1")
    got: list[pb.ReceivedMessage] = []
    seen: set[str] = set()
    with ctx.out.progress(f"pulling from {subscription}", long=a.all) as advance:
        while limit is None or len(got) < limit:
            batch = PULL_BATCH if limit is None else min(PULL_BATCH, limit - len(got))
            request = pb.PullRequest(subscription=subscription, max_messages=batch)
            received = list(ctx.call(ctx.subscriber.Pull, request).received_messages)
            # Without --ack, what was printed may come back (nacked, or its deadline passed):
            # --all ends there rather than print it again.
            new = [m for m in received if m.message.message_id not in seen]
            seen.update(m.message.message_id for m in new)
            try:  # written, flushed and synced first: only then acknowledged
                ctx.out.messages(new)
            except OSError as exc:
                _release(ctx, subscription, received)
                raise OutputFailed(
                    f"cannot write the messages ({exc.strerror or exc}); the {len(received)} "
                    "pulled last were not acknowledged and are delivered again"
                ) from None
            _settle(ctx, subscription, received)
            got.extend(new)
            advance(len(new))
            if not a.all or not received or len(new) < len(received):
                break
    ctx.out.pulled(subscription, got)
    return 0


def _release(ctx: Context, subscription: str, received: list[pb.ReceivedMessage]) -> None:
    """Hand back messages that could not be written, for redelivery now (best effort: their
    ack deadline brings them back otherwise)."""
    import grpc

    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb

    ids = [m.ack_id for m in received]
    if ids and ctx.args.ack:
        request = pb.ModifyAckDeadlineRequest(subscription=subscription, ack_ids=ids, ack_deadline_seconds=0)
        with contextlib.suppress(grpc.RpcError):
            ctx.call(ctx.subscriber.ModifyAckDeadline, request)


def quiet_stdout() -> None:
    """stdout is closed or full: point it at /dev/null, so that the interpreter's own flush at
    exit does not fail again (Python's advice for a closed pipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    with contextlib.suppress(OSError):
        os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _settle(ctx: Context, subscription: str, received: list[pb.ReceivedMessage]) -> None:
    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb

    ids = [m.ack_id for m in received]
    if not ids:
        return
    if ctx.args.ack:
        ctx.call(ctx.subscriber.Acknowledge, pb.AcknowledgeRequest(subscription=subscription, ack_ids=ids))
    elif ctx.args.nack:
        request = pb.ModifyAckDeadlineRequest(subscription=subscription, ack_ids=ids, ack_deadline_seconds=0)
        ctx.call(ctx.subscriber.ModifyAckDeadline, request)


def seek(ctx: Context) -> int:
    import datetime

    from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb

    a = ctx.args
    request = pb.SeekRequest(subscription=ctx.name(a.subscription, "subscriptions"))
    if a.snapshot:
        request.snapshot = ctx.name(a.snapshot, "snapshots")
        target = request.snapshot
    else:
        try:
            when = datetime.datetime.fromisoformat(a.time)
        except ValueError:
            raise UsageError(f"--time takes an ISO 8601 time, not {a.time!r}") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.UTC)
        request.time.FromDatetime(when)
        target = when.isoformat()
    ctx.call(ctx.subscriber.Seek, request)
    ctx.out.sought(request.subscription, target)
    return 0
