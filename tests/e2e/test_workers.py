"""`serve --workers 2`: two gateway processes on one port, driven by the official client.

Connections spread over both workers (each worker's own port says what it served), messages
published and received through the one port, a worker killed with SIGKILL loses no confirmed
ack and no message, the supervisor starts it again, and SIGTERM to the supervisor (or its
death) stops every worker."""

from __future__ import annotations

import concurrent.futures
import functools
import re
import threading
import time
import urllib.request
from collections.abc import Callable

import grpc
import psutil
import pytest
from google.api_core.exceptions import NotFound
from google.cloud import pubsub_v1
from google.pubsub_v1.services.publisher import PublisherClient as PublisherGapic
from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport

from tests.conftest import GatewayFactory
from tests.e2e.clients import await_found, await_subscription, clients, exactly_once_backlog, pull_nothing
from tests.gateways import GatewayProcess, emulator_env

pytestmark = pytest.mark.integration

CONNECTIONS = 24  # each on a TCP connection of its own: both workers get some (1 in 2^23 they do not)
_WORKER = re.compile(r'^pubsub_gateway_worker_info\{[^}]*worker="(\d+)"', re.MULTILINE)


def _metrics(address: str) -> str:
    """One scrape, on a connection of its own (urllib does not keep connections)."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as resp:
        return resp.read().decode()


def _worker_of(text: str) -> str:
    found = _WORKER.search(text)
    assert found is not None, "a worker's /metrics names the worker"
    return found.group(1)


def _get_topic_calls(text: str) -> float:
    pattern = r'^pubsub_gateway_rpc_duration_seconds_count\{[^}]*method="[^"]*/GetTopic"[^}]*\} (\S+)$'
    return sum(float(v) for v in re.findall(pattern, text, re.MULTILINE))


def _worker_processes(gw: GatewayProcess) -> list[psutil.Process]:
    assert gw.proc is not None
    return psutil.Process(gw.proc.pid).children()


def test_connections_spread_over_both_workers(
    start_gateway: GatewayFactory, names: Callable[[str], str]
) -> None:
    gw = start_gateway("--workers", "2")
    own = gw.ready["workers"].split(",")
    assert len(own) == 2
    assert sorted(_worker_of(_metrics(address)) for address in own) == ["1", "2"]
    assert len(_worker_processes(gw)) == 2

    # REST: every scrape of the shared port is a new connection, answered by one worker.
    answered = {_worker_of(_metrics(gw.rest_address)) for _ in range(CONNECTIONS)}
    assert answered == {"1", "2"}

    # gRPC: the official client on channels of their own (no shared subchannel: a new
    # connection each), each GetTopic counted by the worker that answered it.
    pub, _ = clients(gw)
    topic = names("topics")
    pub.create_topic(name=topic)
    for address in own:  # each worker follows the resources, as a process on another host does
        _await_topic(address, topic)
    before = [_get_topic_calls(_metrics(address)) for address in own]
    for _ in range(CONNECTIONS):
        channel = grpc.insecure_channel(gw.address, options=[("grpc.use_local_subchannel_pool", 1)])
        with channel:
            client = PublisherGapic(transport=PublisherGrpcTransport(channel=channel))
            assert client.get_topic(topic=topic).name == topic
    calls = [_get_topic_calls(_metrics(address)) - n for address, n in zip(own, before, strict=True)]
    assert sum(calls) == CONNECTIONS
    assert all(n > 0 for n in calls), f"GetTopic calls per worker: {calls}"


def _await_topic(address: str, topic: str) -> None:
    """Until the worker at its own `address` knows the topic another worker created."""
    with grpc.insecure_channel(address) as channel:
        client = PublisherGapic(transport=PublisherGrpcTransport(channel=channel))
        await_found(lambda: client.get_topic(topic=topic), seconds=10.0)


def _first_worker(gw: GatewayProcess) -> tuple[pubsub_v1.PublisherClient, pubsub_v1.SubscriberClient]:
    """Clients of worker 1 alone (its own port): resources made through them are made in one
    process, whose changes the other follows within about a second (as another host would)."""
    with emulator_env(gw.ready["workers"].split(",")[0]):
        return pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()


def _await_everywhere(gw: GatewayProcess, subscription: str) -> None:
    """Until every worker knows the subscription (and so its topic)."""
    for address in gw.ready["workers"].split(","):
        with emulator_env(address):
            await_subscription(pubsub_v1.SubscriberClient(), subscription, seconds=10.0)


@pytest.mark.timeout(300)  # ~80 s here: 1,500 messages, a takeover after the session timeout
def test_a_killed_worker_loses_no_ack_and_no_message(
    start_gateway: GatewayFactory, names: Callable[[str], str]
) -> None:
    gw = start_gateway("--workers", "2", "--worker-max-restarts", "2")
    total = 1500
    _, subscription = exactly_once_backlog(*_first_worker(gw), names, total)
    _await_everywhere(gw, subscription)
    _, sub = clients(gw)

    lock = threading.Lock()
    confirmed: dict[bytes, float] = {}  # data -> when its ack was confirmed
    deliveries: list[tuple[bytes, float]] = []
    all_in = threading.Event()

    def callback(message: pubsub_v1.subscriber.message.Message) -> None:
        with lock:
            deliveries.append((message.data, time.monotonic()))
        # Not a blocking wait with a timeout: an ack sent while its partition's owner is dead
        # gets transient errors until the group moves the partition (a session timeout), and
        # the client retries it with a growing backoff for up to 10 minutes; a late success
        # is a confirmed ack, and the message it acked must not come again.
        message.ack_with_response().add_done_callback(functools.partial(on_ack, message.data))

    def on_ack(data: bytes, outcome: concurrent.futures.Future[object]) -> None:
        if outcome.exception() is not None:  # not confirmed (e.g. its lease ran out): it comes again
            return
        with lock:
            confirmed.setdefault(data, time.monotonic())
            if len(confirmed) == total:
                all_in.set()

    flow = pubsub_v1.types.FlowControl(max_messages=200)
    future = sub.subscribe(subscription, callback, flow_control=flow)
    try:
        deadline = time.monotonic() + 60
        while len(confirmed) < total // 4:
            assert time.monotonic() < deadline, f"only {len(confirmed)} acks confirmed before the kill"
            time.sleep(0.05)
        victim = _owner(gw, subscription)
        victim.kill()  # SIGKILL: no shutdown code runs in that worker
        killed_at = time.monotonic()
        assert all_in.wait(120), _missing(total, confirmed, deliveries, killed_at)
    finally:
        future.cancel()
        future.result(timeout=30)

    with lock:
        before = {data for data, at in confirmed.items() if at < killed_at}
        again = sorted({data for data, at in deliveries if at > killed_at and data in before})
    assert len(before) >= total // 4
    assert again == [], f"{len(again)} messages whose ack was confirmed came back: {again[:5]}"
    assert set(confirmed) == {f"m{i}".encode() for i in range(total)}
    assert pull_nothing(sub, subscription, 8.0) == []

    # The supervisor started the killed worker again; SIGTERM to it stops everything.
    log = _await_log(gw, "is serving again")
    assert f"(pid {victim.pid}) died (killed by SIGKILL); starting it again" in log
    survivors = _worker_processes(gw)
    assert len(survivors) == 2
    assert victim.pid not in {p.pid for p in survivors}
    assert gw.terminate(timeout=60) == 0
    _, alive = psutil.wait_procs(survivors, timeout=10)
    assert alive == []


def _missing(
    total: int, confirmed: dict[bytes, float], deliveries: list[tuple[bytes, float]], killed_at: float
) -> str:
    """What the test saw of the messages whose ack never came: when each was delivered."""
    missing = sorted({f"m{i}".encode() for i in range(total)} - set(confirmed))
    seen = {data: [round(at - killed_at, 1) for d, at in deliveries if d == data] for data in missing[:10]}
    return f"{len(confirmed)} of {total} acked after the kill; delivered at (s after the kill): {seen}"


def test_workers_stop_when_the_supervisor_is_killed(start_gateway: GatewayFactory) -> None:
    gw = start_gateway("--workers", "2")
    workers = _worker_processes(gw)
    assert len(workers) == 2
    gw.kill()  # SIGKILL to the supervisor: the workers see their lifeline end
    _, alive = psutil.wait_procs(workers, timeout=60)
    assert alive == []


def _owner(gw: GatewayProcess, subscription: str) -> psutil.Process:
    """A worker that owns partitions of the subscription (its backlog gauge is reported by the
    owners only); the first worker when none says so yet."""
    label = subscription.rsplit("/", 1)[1]
    pids = {}
    for address in gw.ready["workers"].split(","):
        text = _metrics(address)
        pid = re.search(r'^pubsub_gateway_worker_info\{[^}]*pid="(\d+)"', text, re.MULTILINE)
        assert pid is not None
        owns = re.search(
            rf"^pubsub_subscription_num_undelivered_messages\{{[^}}]*{label}", text, re.MULTILINE
        )
        pids[int(pid.group(1))] = owns is not None
    owners = [pid for pid, owns in pids.items() if owns] or list(pids)
    return psutil.Process(owners[0])


def _await_log(gw: GatewayProcess, text: str, seconds: float = 90.0) -> str:
    deadline = time.monotonic() + seconds
    while True:
        log = gw.log_paths[-1].read_text(errors="replace")
        if text in log:
            return log
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} not in the gateway's log:\n{log[-4000:]}")
        time.sleep(0.2)


def test_publish_fails_over_between_workers_not_lost(
    start_gateway: GatewayFactory, names: Callable[[str], str]
) -> None:
    """Publishing goes on through the one port while a worker is killed: every publish that
    returned a message id is delivered."""
    gw = start_gateway("--workers", "2")
    admin_pub, admin_sub = _first_worker(gw)
    topic, subscription = names("topics"), names("subscriptions")
    admin_pub.create_topic(name=topic)
    admin_sub.create_subscription(name=subscription, topic=topic)
    _await_everywhere(gw, subscription)
    pub, sub = clients(gw)
    published: set[bytes] = set()
    victim = _worker_processes(gw)[0]
    for i in range(600):
        if i == 200:
            victim.kill()
        data = f"p{i}".encode()
        try:
            pub.publish(topic, data).result(timeout=60)
        except Exception:  # refused while its connection died: not published
            continue
        published.add(data)
    assert len(published) >= 590
    got: set[bytes] = set()
    deadline = time.monotonic() + 60
    while not published <= got and time.monotonic() < deadline:
        try:
            resp = sub.pull(subscription=subscription, max_messages=500, timeout=10)
        except NotFound:
            continue
        got |= {m.message.data for m in resp.received_messages}
        if resp.received_messages:
            sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in resp.received_messages])
    assert published <= got
