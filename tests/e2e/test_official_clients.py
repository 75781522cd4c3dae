"""The official Go, Java and Node clients against a gateway process (issue 17).

Each language's program (tests/clients/, built and cached by tests/official_clients.py) runs one
scenario per call with PUBSUB_EMULATOR_HOST set to the shared gateway and prints JSON; the
tests assert on it exactly and cross-check with the Python client: what a program made, the
Python client reads; what Python publishes, the program receives with its attributes; what a
program publishes, Python receives with its attributes, ordering key and message id.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from google.api_core.exceptions import NotFound
from google.cloud import pubsub_v1  # type: ignore[import-untyped]

from tests.e2e.clients import clients, pull_nothing, topic_and_subscription
from tests.gateways import GatewayProcess
from tests.official_clients import LANGUAGES, ClientProgram, build

# The timeout covers the first test of each language, whose setup may build its program cold.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
PROJECT = "test-project"  # the project of the `names` fixture


def _say(request: pytest.FixtureRequest, line: str) -> None:
    """A line on the terminal now, past pytest's output capture."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        return
    with capture.global_and_fixture_disabled():
        reporter.ensure_newline()
        reporter.write_line(f"[official clients] {line}")


def _language(item: pytest.Item) -> str | None:
    """The language a collected test runs (its `program` parameter), if it is one of ours."""
    callspec = getattr(item, "callspec", None)
    return None if callspec is None else callspec.params.get("program")


@pytest.fixture(scope="module")
def builds(request: pytest.FixtureRequest) -> Iterator[dict[str, Future[ClientProgram]]]:
    """The programs of the languages this run selected, built side by side: a cold Go build is
    mostly compiling, Maven's and npm's mostly downloading."""
    selected = {_language(item) for item in request.session.items}
    wanted = [language for language in LANGUAGES if language in selected]
    with ThreadPoolExecutor(max_workers=len(LANGUAGES)) as pool:
        yield {language: pool.submit(build, language) for language in wanted}


@pytest.fixture(scope="module", params=LANGUAGES)
def program(
    request: pytest.FixtureRequest, builds: dict[str, Future[ClientProgram]]
) -> Iterator[ClientProgram]:
    """One language's program, built once; the module's tests run grouped by language."""
    waited = time.monotonic()
    built = builds[request.param].result()
    waited = time.monotonic() - waited
    how = "cached" if built.cached else "built"
    _say(
        request,
        f"{built.language}: {how} in {built.build_seconds:.1f} s, waited {waited:.1f} s ({built.path})",
    )
    started = time.monotonic()
    yield built
    _say(request, f"{built.language}: tests took {time.monotonic() - started:.1f} s")


def _publish(pub: pubsub_v1.PublisherClient, topic: str, count: int) -> dict[str, dict[str, str]]:
    """m0..m<count-1> with two attributes each; returns the attributes by data."""
    sent = {f"m{i}": {"from": "python", "n": str(i)} for i in range(count)}
    for f in [pub.publish(topic, data.encode(), **attrs) for data, attrs in sent.items()]:
        f.result(timeout=30)
    return sent


def _python_receive(
    sub: pubsub_v1.SubscriberClient, subscription: str, count: int, timeout: float = 60.0
) -> list[pubsub_v1.subscriber.message.Message]:
    """StreamingPull with the Python client, acking each message, until `count` arrived and
    a second more passed (to see any extra delivery); in arrival order."""
    got: list[pubsub_v1.subscriber.message.Message] = []
    lock = threading.Lock()

    def callback(message: pubsub_v1.subscriber.message.Message) -> None:
        with lock:
            got.append(message)
        message.ack()

    future = sub.subscribe(subscription, callback)
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)
    future.cancel()
    future.result(timeout=30)
    with lock:
        return list(got)


def _datas(result: dict[str, Any]) -> list[str]:
    return [d["data"] for d in result["deliveries"]]


def _finished(result: dict[str, Any]) -> None:
    """The program saw every expected message confirmed before its own timeout."""
    assert not result["timed_out"], (
        f"timed out: {len(result['deliveries'])} deliveries, acked {sorted(result['acked'])}"
    )


def test_admin_calls_create_get_list_update_and_delete(
    program: ClientProgram, shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    lang, host = program.language, shared_gateway.address
    topic, subscription = names("topics"), names("subscriptions")
    out = program.run("admin-create", host, project=PROJECT, topic=topic, subscription=subscription)
    subscription_fields = {
        "name": subscription,
        "topic": topic,
        "enable_message_ordering": False,
        "enable_exactly_once_delivery": False,
    }
    assert out == {
        "topic": {"name": topic, "labels": {"lang": lang}},
        "topic_listed": True,
        "subscription": {**subscription_fields, "ack_deadline_seconds": 15, "labels": {"lang": lang}},
        "subscription_listed": True,
        "updated": {
            **subscription_fields,
            "ack_deadline_seconds": 42,
            "labels": {"lang": lang, "updated": "yes"},
        },
    }
    # The Python client sees what the program made and changed.
    pub, sub = clients(shared_gateway)
    assert dict(pub.get_topic(topic=topic).labels) == {"lang": lang}
    got = sub.get_subscription(subscription=subscription)
    assert (got.topic, got.ack_deadline_seconds) == (topic, 42)
    assert dict(got.labels) == {"lang": lang, "updated": "yes"}

    out = program.run("admin-delete", host, project=PROJECT, topic=topic, subscription=subscription)
    assert out == {
        "get_subscription": "NOT_FOUND",
        "get_topic": "NOT_FOUND",
        "topic_listed": False,
        "subscription_listed": False,
    }
    with pytest.raises(NotFound):
        sub.get_subscription(subscription=subscription)
    with pytest.raises(NotFound):
        pub.get_topic(topic=topic)


def test_published_attributes_and_ordering_keys_reach_the_python_client(
    program: ClientProgram, shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    _, sub, topic, subscription = topic_and_subscription(
        shared_gateway, names, enable_message_ordering=True, ack_deadline_seconds=30
    )
    keys, per_key, unkeyed = 3, 8, 4
    out = program.run(
        "publish",
        shared_gateway.address,
        project=PROJECT,
        topic=topic,
        keys=keys,
        per_key=per_key,
        unkeyed=unkeyed,
    )
    expected: dict[str, tuple[str, dict[str, str]]] = {}  # data -> (ordering key, attributes)
    for k in range(keys):
        for i in range(per_key):
            expected[f"k{k}:{i}"] = (f"k{k}", {"lang": program.language, "key": f"k{k}", "seq": str(i)})
    for j in range(unkeyed):
        expected[f"free:{j}"] = ("", {"lang": program.language, "seq": str(j)})
    ids = out["ids"]
    assert set(ids) == set(expected)
    assert len(set(ids.values())) == len(expected), "every message has its own id"

    got = _python_receive(sub, subscription, len(expected))
    datas = [m.data.decode() for m in got]
    assert sorted(datas) == sorted(expected), "each message once"
    for m in got:
        key, attributes = expected[m.data.decode()]
        assert (m.ordering_key, dict(m.attributes), m.message_id) == (key, attributes, ids[m.data.decode()])
    for k in range(keys):
        assert [d for d in datas if d.startswith(f"k{k}:")] == [f"k{k}:{i}" for i in range(per_key)]


def test_streaming_pull_acks_each_message_once_and_nacked_ones_come_back(
    program: ClientProgram, shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    pub, sub, topic, subscription = topic_and_subscription(shared_gateway, names, ack_deadline_seconds=30)
    sent = _publish(pub, topic, 30)
    nack = ["m2", "m17", "m29"]
    out = program.run(
        "receive",
        shared_gateway.address,
        project=PROJECT,
        subscription=subscription,
        expect=30,
        nack=",".join(nack),
    )
    _finished(out)
    # Each message once, with its attributes; a nacked one once more after its nack.
    assert collections.Counter(_datas(out)) == {data: 2 if data in nack else 1 for data in sent}
    assert {d["data"]: d["attributes"] for d in out["deliveries"]} == sent
    assert {d["ordering_key"] for d in out["deliveries"]} == {""}
    assert sorted(out["nacked"]) == sorted(nack)
    assert sorted(out["acked"]) == sorted(sent), "every message acked once, a nacked one on its return"
    assert pull_nothing(sub, subscription, 2.0) == [], "acked messages are not delivered again"


def test_flow_control_caps_the_messages_out_at_once(
    program: ClientProgram, shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    pub, _, topic, subscription = topic_and_subscription(shared_gateway, names, ack_deadline_seconds=30)
    sent = _publish(pub, topic, 24)
    out = program.run(
        "receive",
        shared_gateway.address,
        project=PROJECT,
        subscription=subscription,
        expect=24,
        max_outstanding=4,
        hold_ms=50,
    )
    _finished(out)
    assert sorted(_datas(out)) == sorted(sent)
    # Never more than 4 unacked in the program's hands, and the client did fill its window.
    assert out["max_outstanding"] == 4


def test_ordered_receive_keeps_each_key_in_publish_order(
    program: ClientProgram, shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    _, _, topic, subscription = topic_and_subscription(
        shared_gateway, names, enable_message_ordering=True, ack_deadline_seconds=30
    )
    keys, per_key = 4, 15
    host = shared_gateway.address
    out = program.run("publish", host, project=PROJECT, topic=topic, keys=keys, per_key=per_key)
    assert len(out["ids"]) == keys * per_key
    out = program.run(
        "receive", host, project=PROJECT, subscription=subscription, expect=keys * per_key, hold_ms=5
    )
    _finished(out)
    for k in range(keys):
        mine = [d for d in out["deliveries"] if d["ordering_key"] == f"k{k}"]
        assert [d["data"] for d in mine] == [f"k{k}:{i}" for i in range(per_key)]
    assert len(out["deliveries"]) == keys * per_key


def test_exactly_once_acks_report_success(
    program: ClientProgram, shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    pub, sub, topic, subscription = topic_and_subscription(
        shared_gateway, names, enable_exactly_once_delivery=True, ack_deadline_seconds=30
    )
    sent = _publish(pub, topic, 25)
    out = program.run(
        "receive",
        shared_gateway.address,
        project=PROJECT,
        subscription=subscription,
        expect=25,
        ack_result=1,
    )
    _finished(out)
    assert out["ack_results"] == dict.fromkeys(sent, "SUCCESS")
    assert sorted(_datas(out)) == sorted(sent), "each message delivered once"
    assert pull_nothing(sub, subscription, 2.0) == [], "confirmed acks are never delivered again"
