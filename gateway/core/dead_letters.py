"""Dead letters of one subscription in this process: a message delivered max_delivery_attempts
times goes to the dead-letter topic and is acked on the subscription, in one transaction per
partition (the ack is the lease log's half: LeaseLog.ack_in), so it lands there exactly once,
even across crashes (docs/delivery.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from gateway.core.lease_log import LeaseLog
from gateway.core.policies import Policies, dead_letter_headers
from gateway.core.tally import Tally
from gateway.errors import InvalidArgument, PermissionDenied
from gateway.kafka.producer import TransactionalSender, TxnRecord
from gateway.leases.commands import Command
from gateway.leases.state import DeadLetter, PartitionState
from gateway.translate.records import Record

log = logging.getLogger(__name__)
# How long a partition is left alone after Kafka's authorizer refused its transaction: each
# try makes a transactional producer.
DENIED_RETRY_SECONDS = 5.0
# A dead message that its dead-letter topic refuses as too large (an adopted topic's own
# max.message.bytes) stays in the subscription, undelivered, and is tried again this often.
TOO_LARGE_RETRY_SECONDS = 60.0

Dead = DeadLetter[Record]  # (offset, deliveries, record): PartitionState.take_dead


class DeadLetters:
    """`policies` names the dead-letter topic (read anew each round); `settled` tells the
    streams that acks ended deliveries of theirs."""

    def __init__(
        self,
        *,
        name: str,
        lease_log: LeaseLog,
        kafka_config: dict[str, Any],
        transactional_prefix: str,
        policies: Callable[[], Policies],
        tally: Callable[[], Tally],
        settled: Callable[[int, Command], None],
    ) -> None:
        self.name = name
        self._log = lease_log
        self._config = kafka_config
        self._txn_prefix = transactional_prefix
        self._policies = policies
        self._tally = tally
        self._settled = settled
        self._senders: dict[int, TransactionalSender] = {}
        # Partitions whose transaction Kafka's authorizer refused: the refusal, and when to try
        # again. Pulls and streams end with it meanwhile (SubscriptionRunner.take).
        self.denied: dict[int, tuple[PermissionDenied, float]] = {}
        # Dead-letter topics that refused a transaction's batch as too large: each dead message
        # goes in a transaction of its own to them. Dead messages refused even alone, by
        # partition: offset -> when to try again (they stay taken meanwhile).
        self._alone: set[str] = set()
        self._too_large: dict[int, dict[int, float]] = {}

    def refusal(self) -> PermissionDenied | None:
        """A refusal of Kafka's authorizer that holds now, if any."""
        return next(iter(self.denied.values()))[0] if self.denied else None

    async def forget(self, p: int) -> None:
        """The partition is no longer this process's."""
        self.denied.pop(p, None)
        sender = self._senders.pop(p, None)
        if sender is not None:
            await sender.close()

    async def close(self) -> None:
        for sender in self._senders.values():
            await sender.close()
        self._senders.clear()

    async def sweep(self, p: int, state: PartitionState[Record]) -> bool:
        """Forward what of the partition is due; returns whether a refusal of Kafka's
        authorizer is new (waiting pulls and streams must end with it)."""
        denied = self.denied.get(p)
        if denied is not None and time.monotonic() < denied[1]:
            return False
        self._retry_too_large(p, state)
        dead = state.take_dead()
        if not dead:
            return False
        try:
            await self._forward(p, dead)
        except PermissionDenied as exc:
            state.return_dead(self._unheld(p, dead))
            if denied is None:
                log.error("%s: dead-lettering from partition %d: %s", self.name, p, exc.message)
            self.denied[p] = (exc, time.monotonic() + DENIED_RETRY_SECONDS)
            return True
        except Exception as exc:  # noqa: BLE001 - retried next round; the loop must live
            state.return_dead(self._unheld(p, dead))
            log.warning("%s: dead-lettering from partition %d failed: %s", self.name, p, exc)
        else:
            self.denied.pop(p, None)
        return False

    async def _forward(self, p: int, dead: list[Dead]) -> None:
        """Publish to the dead-letter topic and ack on this subscription, in transactions: each
        message lands in the dead-letter topic exactly once, even across crashes. All in one
        transaction, unless the topic refused one's batch as too large (an adopted topic takes
        less than the producer's batches): then one message a transaction, and one that the
        topic refuses even alone is held back (_hold_too_large)."""
        target = self._policies().dead_letter_kafka_topic
        if target is None:
            raise RuntimeError("the dead-letter topic does not exist")
        groups = [dead] if target not in self._alone else [[d] for d in dead]
        for group in groups:
            try:
                await self._transact(p, target, group)
            except InvalidArgument as exc:  # the only one a write raises: Kafka's "too large"
                # The refused batch used up sequence numbers the broker never saw: the next
                # transaction of this producer would fail for the gap. A new one starts clean.
                sender = self._senders.pop(p, None)
                if sender is not None:
                    await sender.close()
                if len(group) == 1:
                    self._hold_too_large(p, group[0][0], target, exc)
                    continue
                log.warning(
                    "%s: dead-letter topic %s refused a batch as too large; it gets one message "
                    "a transaction from now on",
                    self.name,
                    target,
                )
                self._alone.add(target)
                await self._forward(p, group)

    def _hold_too_large(self, p: int, offset: int, target: str, exc: InvalidArgument) -> None:
        """A dead message its dead-letter topic refuses even alone: not lost, not delivered; it
        stays taken, and is tried again after TOO_LARGE_RETRY_SECONDS (the topic's limit may be
        raised meanwhile)."""
        log.warning(
            "%s: the dead message at partition %d, offset %d, is too large for dead-letter topic "
            "%s (%s); it stays in the subscription and is tried again in %.0f s",
            self.name,
            p,
            offset,
            target,
            exc.message,
            TOO_LARGE_RETRY_SECONDS,
        )
        self._too_large.setdefault(p, {})[offset] = time.monotonic() + TOO_LARGE_RETRY_SECONDS

    def _unheld(self, p: int, dead: list[Dead]) -> list[int]:
        """The offsets of `dead` not held back as too large for the dead-letter topic."""
        held = self._too_large.get(p, {})
        return [o for o, _, _ in dead if o not in held]

    def _retry_too_large(self, p: int, state: PartitionState[Record]) -> None:
        held = self._too_large.get(p)
        if not held:
            return
        now = time.monotonic()
        due = [offset for offset, when in held.items() if when <= now]
        for offset in due:
            del held[offset]
        state.return_dead(due)

    async def _transact(self, p: int, target: str, dead: list[Dead]) -> None:
        """`dead` to `target` and their ack to the lease log, in one transaction."""
        sender = self._senders.get(p)
        if sender is None:
            sender = TransactionalSender(self._config, f"{self._txn_prefix}.{self._log.topic}.{p}")
            await sender.start()
            self._senders[p] = sender
        letters = [
            TxnRecord(target, None, r.key, r.value, dead_letter_headers(r, self.name, n)) for _, n, r in dead
        ]
        ack = await self._log.ack_in(sender, p, (o for o, _, _ in dead), letters)
        self._settled(p, ack)
        self._tally().on_dead_lettered(p, [o for o, _, _ in dead])
        log.info("%s: dead-lettered %d messages of partition %d", self.name, len(dead), p)
