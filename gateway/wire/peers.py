"""Forwarding ack ids to the gateway process that owns their partition, over gRPC."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import grpc
from google.rpc import error_details_pb2, status_pb2

from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
from gateway._pb.google.pubsub.v1 import pubsub_pb2_grpc as pb_grpc
from gateway.core import acks, exactly_once
from gateway.security.peer import PeerTokens
from gateway.wire.access import FORWARDED

DETAILS_KEY = "grpc-status-details-bin"
# The owner waits up to its exactly-once patience for a write before it answers: a forwarded
# call must outlast that, or a write that lands late is answered as an unreachable owner.
TIMEOUT = acks.EXACTLY_ONCE_PATIENCE_SECONDS + 5.0


def ack_failures(metadata: Iterable[tuple[str, str | bytes]] | None) -> dict[str, str] | None:
    """The per-id reasons of an exactly-once failure, from a call's trailing metadata."""
    for key, value in metadata or ():
        if key == DETAILS_KEY and isinstance(value, bytes):
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    return dict(info.metadata)
    return None


class GrpcPeers:
    """Forwarded calls carry FORWARDED with a peer token for their subscription (access.py)."""

    def __init__(self, tokens: PeerTokens, credentials: grpc.ChannelCredentials | None = None) -> None:
        self._tokens = tokens
        self._credentials = credentials  # TLS, when the gateway speaks it: its peers do too
        self._stubs: dict[str, pb_grpc.SubscriberStub] = {}
        self._channels: list[grpc.aio.Channel] = []

    def _stub(self, address: str) -> pb_grpc.SubscriberStub:
        stub = self._stubs.get(address)
        if stub is None:
            if self._credentials is None:
                channel = grpc.aio.insecure_channel(address)
            else:
                channel = grpc.aio.secure_channel(address, self._credentials)
            self._channels.append(channel)
            stub = self._stubs[address] = pb_grpc.SubscriberStub(channel)
        return stub

    async def settle(
        self, address: str, subscription: str, ack_ids: Sequence[str], seconds: int | None
    ) -> dict[str, str]:
        stub = self._stub(address)
        try:
            metadata = ((FORWARDED, self._tokens.token(subscription)),)
        except LookupError:  # no key loaded yet: as if the owner could not be reached
            return dict.fromkeys(ack_ids, exactly_once.UNREACHABLE)
        try:
            if seconds is None:
                await stub.Acknowledge(
                    pb.AcknowledgeRequest(subscription=subscription, ack_ids=ack_ids),
                    metadata=metadata,
                    timeout=TIMEOUT,
                )
            else:
                await stub.ModifyAckDeadline(
                    pb.ModifyAckDeadlineRequest(
                        subscription=subscription,
                        ack_ids=ack_ids,
                        ack_deadline_seconds=seconds,
                    ),
                    metadata=metadata,
                    timeout=TIMEOUT,
                )
        except grpc.aio.AioRpcError as err:
            invalid = err.code() == grpc.StatusCode.INVALID_ARGUMENT
            reasons = ack_failures(err.trailing_metadata()) if invalid else None
            if reasons is None:
                return dict.fromkeys(ack_ids, exactly_once.UNREACHABLE)
            return {i: r for i, r in reasons.items() if r != exactly_once.SUCCEEDED_IN_FAILED_CALL}
        return {}

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close()
