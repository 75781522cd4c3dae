"""Reaching the gateway process that owns a partition.

Exactly-once delivery needs the owner's lease state to judge an ack id, and only the owner has
it in memory. A process that receives ack ids of partitions it does not own forwards them to
the owner; the owner is found through the consumer group, whose members carry the client id
`pubsub-gateway@<address>`. The transport (gRPC) lives in the wire layer; the core sees only
this protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

CLIENT_ID_PREFIX = "pubsub-gateway@"


def client_id(address: str) -> str:
    return CLIENT_ID_PREFIX + address


def address_of(client_id: str) -> str | None:
    return client_id[len(CLIENT_ID_PREFIX) :] if client_id.startswith(CLIENT_ID_PREFIX) else None


class Peers(Protocol):
    async def settle(
        self, address: str, subscription: str, ack_ids: Sequence[str], seconds: int | None
    ) -> dict[str, str]:
        """Ack (seconds None) or modack ack ids at the owner; returns the failed ids' reasons."""
