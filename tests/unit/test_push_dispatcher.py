"""The push dispatcher (gateway.push.dispatcher) against a fake core and a fake endpoint.

The fake delivery service hands out messages through stream sessions whose `max_messages`
bounds what they lease, puts nacked messages back, and records acks; the HTTP client is a fake
endpoint that answers as a test says. No broker, no protos.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import AsyncIterator, Callable, Sequence
from types import SimpleNamespace
from typing import Any

from gateway.core.tally import Tallies, Tally
from gateway.errors import Unavailable
from gateway.push import dispatcher as dispatcher_mod
from gateway.push.auth import TokenSigner
from gateway.push.body import PushRequest
from gateway.push.http_push import HttpPusher
from gateway.push.sender import Outcome
from gateway.translate.records import Record, record

SUB = "projects/p/subscriptions/s"


@dataclasses.dataclass(frozen=True)
class FakeDelivery:
    ack_id: str
    record: Record
    attempt: int


class FakeSession:
    def __init__(self, core: FakeCore, max_messages: int) -> None:
        self.core, self.max = core, max_messages
        self.outstanding: set[str] = set()
        self.closed: Unavailable | None = None
        self.released = False
        self.deadline_seconds = 10

    def set_deadline(self, seconds: int) -> None:
        self.deadline_seconds = seconds

    def owns(self, partition: int) -> bool:
        return True

    def close(self, reason: str) -> None:
        self.closed = Unavailable(reason)
        self.core.wake.set()

    def release(self) -> None:
        self.released = True

    async def batches(self) -> AsyncIterator[SimpleNamespace]:
        while True:
            if self.closed is not None:
                raise self.closed
            room = self.max - len(self.outstanding)
            taken = [self.core.backlog.pop(0) for _ in range(min(room, len(self.core.backlog)))]
            if taken:
                self.outstanding.update(taken)
                yield SimpleNamespace(deliveries=[self.core.delivery(m) for m in taken], confirmations=[])
                continue
            self.core.wake.clear()
            try:
                await asyncio.wait_for(self.core.wake.wait(), 0.05)
            except TimeoutError:
                pass


class FakeCore:
    """Open streams, ack, nack: the part of DeliveryService a dispatcher calls."""

    def __init__(self, messages: int, key_of: Callable[[int], bytes | None] = lambda _: None) -> None:
        self.backlog = [f"m{i}" for i in range(messages)]
        self.key_of = key_of
        self.attempts: dict[str, int] = {}
        self.acked: list[str] = []
        self.nacked: list[str] = []
        self.sessions: list[FakeSession] = []
        self.wake = asyncio.Event()
        self.changed = asyncio.Event()  # an ack, a nack, or a push began
        self.tallies = Tallies(Tally, 1000)  # push outcomes, for /metrics

    def delivery(self, mid: str) -> FakeDelivery:
        self.attempts[mid] = self.attempts.get(mid, 0) + 1
        offset = int(mid[1:])
        return FakeDelivery(mid, record(0, offset, 0, self.key_of(offset), mid.encode(), None), 0)

    async def open_stream(self, name: str, deadline: int, max_messages: int, max_bytes: int) -> FakeSession:
        assert (name, max_bytes) == (SUB, 0) and max_messages >= 1
        session = FakeSession(self, max_messages)
        self.sessions.append(session)
        return session

    def _settle(self, ids: Sequence[str]) -> None:
        for s in self.sessions:
            s.outstanding.difference_update(ids)
        self.wake.set()
        self.changed.set()

    async def acknowledge(self, name: str, ids: Sequence[str]) -> None:
        self.acked.extend(ids)
        self._settle(ids)

    async def modify_ack_deadline(self, name: str, ids: Sequence[str], seconds: int) -> None:
        assert seconds == 0
        self.nacked.extend(ids)
        self.backlog.extend(ids)
        self._settle(ids)


class FakeEndpoint:
    def __init__(self, core: FakeCore, answer: Callable[[str], bool], latency: float = 0.002) -> None:
        self.core, self.answer, self.latency = core, answer, latency
        self.active = self.peak = 0
        self.times: list[float] = []

    async def post(self, url: str, request: PushRequest, time_left: float, token: str | None) -> Outcome:
        self.active += 1
        self.peak = max(self.peak, self.active)
        self.times.append(asyncio.get_running_loop().time())
        self.core.changed.set()
        await asyncio.sleep(self.latency)
        self.active -= 1
        ok = self.answer(request.body.decode())
        return Outcome(ok, "HTTP 200" if ok else "HTTP 500")


def _resource(ordered: bool = False) -> Any:
    push = SimpleNamespace(
        push_endpoint="http://e.test/push",
        no_wrapper=SimpleNamespace(write_metadata=False),
        oidc_token=SimpleNamespace(service_account_email="", audience=""),
        HasField=lambda _: False,
    )
    proto = SimpleNamespace(
        push_config=push, ack_deadline_seconds=10, enable_message_ordering=ordered, HasField=lambda _: False
    )
    return SimpleNamespace(name=SUB, meta=SimpleNamespace(uid="u1"), proto=proto)


async def _run(
    core: FakeCore,
    endpoint: FakeEndpoint,
    done: Callable[[], bool],
    max_window: int = 1000,
    ordered: bool = False,
) -> dispatcher_mod.Dispatcher:
    res = _resource(ordered)
    d = dispatcher_mod.Dispatcher(
        res,
        core,  # type: ignore[arg-type]
        HttpPusher(res, endpoint, TokenSigner(list, "http://i")),  # type: ignore[arg-type]
        max_window,
        max_senders=50,
    )
    d.start()
    await _until(core, done, 20)
    await d.stop(grace=5)
    return d


async def _until(core: FakeCore, done: Callable[[], bool], seconds: float) -> None:
    async with asyncio.timeout(seconds):
        while not done():
            core.changed.clear()
            await core.changed.wait()


async def test_every_message_is_pushed_and_acked_once_and_the_window_opens() -> None:
    core = FakeCore(600)
    endpoint = FakeEndpoint(core, lambda _: True)
    d = await _run(core, endpoint, lambda: len(core.acked) == 600, max_window=64)
    assert sorted(core.acked) == sorted(f"m{i}" for i in range(600))
    assert set(core.attempts.values()) == {1}
    assert d.window.limit == 64
    assert 10 < endpoint.peak <= 64, "concurrency grows with the window and never passes it"
    assert all(s.released for s in core.sessions)


async def test_failures_nack_back_off_and_shrink_the_window() -> None:
    failures = {"m0": 4}

    def answer(body: str) -> bool:
        mid = "m0" if '"messageId":"0"' in body else "other"
        left = failures.get(mid, 0)
        failures[mid] = left - 1
        return left <= 0

    core = FakeCore(1)
    endpoint = FakeEndpoint(core, answer)
    d = await _run(core, endpoint, lambda: core.acked == ["m0"])
    assert core.nacked == ["m0"] * 4
    gaps = [b - a for a, b in itertools.pairwise(endpoint.times)]
    assert [round(g, 1) for g in gaps] == [0.1, 0.2, 0.4, 0.8], gaps
    assert d.window.limit == 1 + 1, "halved to 1 by the failures, +1 for the success"


async def test_stop_lets_pushes_in_flight_finish() -> None:
    core = FakeCore(3)
    endpoint = FakeEndpoint(core, lambda _: True, latency=0.3)
    await _run(core, endpoint, lambda: endpoint.active == 3)
    assert sorted(core.acked) == ["m0", "m1", "m2"], "stop() waited for them and wrote their acks"
    assert all(s.released for s in core.sessions)


async def test_stop_cancels_and_nacks_what_outlives_the_grace() -> None:
    core = FakeCore(2)
    endpoint = FakeEndpoint(core, lambda _: True, latency=30)
    res = _resource()
    d = dispatcher_mod.Dispatcher(
        res,
        core,  # type: ignore[arg-type]
        HttpPusher(res, endpoint, TokenSigner(list, "http://i")),  # type: ignore[arg-type]
        10,
        max_senders=50,
    )
    d.start()
    await _until(core, lambda: endpoint.active == 2, 5)
    await d.stop(grace=0.1)
    assert sorted(core.nacked) == ["m0", "m1"] and core.acked == []


class KeyedEndpoint(FakeEndpoint):
    """Records, per ordering key, the pushes in the order they began and the most at once."""

    def __init__(self, core: FakeCore, answer: Callable[[str], bool]) -> None:
        super().__init__(core, answer, latency=0.005)
        self.by_key: dict[bytes | None, list[int]] = {}
        self.active_keys: dict[bytes | None, int] = {}
        self.key_peak = 0

    async def post(self, url: str, request: PushRequest, time_left: float, token: str | None) -> Outcome:
        offset = int(request.body.decode().split('"messageId":"')[1].split('"')[0])
        key = self.core.key_of(offset)
        self.by_key.setdefault(key, []).append(offset)
        self.active_keys[key] = self.active_keys.get(key, 0) + 1
        self.key_peak = max(self.key_peak, self.active_keys[key])
        try:
            return await super().post(url, request, time_left, token)
        finally:
            self.active_keys[key] -= 1


async def test_with_ordering_a_key_is_pushed_one_message_at_a_time_in_order() -> None:
    core = FakeCore(300, key_of=lambda o: b"k%d" % (o % 3))
    endpoint = KeyedEndpoint(core, lambda _: True)
    await _run(core, endpoint, lambda: len(core.acked) == 300, max_window=64, ordered=True)
    assert endpoint.key_peak == 1, "never two pushes of one key at once"
    assert endpoint.peak > 1, "different keys still go in parallel"
    for k in range(3):
        assert endpoint.by_key[b"k%d" % k] == list(range(k, 300, 3))


async def test_with_ordering_a_failed_push_sends_the_rest_of_its_key_back_unsent() -> None:
    failed: set[int] = set()

    def answer(body: str) -> bool:
        offset = int(body.split('"messageId":"')[1].split('"')[0])
        if offset == 3 and offset not in failed:
            failed.add(offset)
            return False
        return True

    core = FakeCore(10, key_of=lambda o: b"k")
    endpoint = KeyedEndpoint(core, answer)
    await _run(core, endpoint, lambda: len(core.acked) == 10, ordered=True)
    pushed = endpoint.by_key[b"k"]
    assert pushed[:4] == [0, 1, 2, 3], "in order up to the failure"
    assert core.nacked[0] == "m3", core.nacked
    assert core.nacked[1:] and set(core.nacked[1:]) <= {f"m{i}" for i in range(4, 10)}, (
        "then what was taken of the rest of its key, nacked without being pushed"
    )
    assert sorted(pushed[4:]) == list(range(3, 10)), "each pushed once more after the failure"
