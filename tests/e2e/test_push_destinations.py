"""Push destinations (docs/push.md, "Destinations") through the official client on a real broker.

The gateway refuses endpoints whose host is a refused address when they are set, refuses names
resolving to refused addresses when it pushes (keeping the messages), and never logs the
credentials of an endpoint URL.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from google.api_core import exceptions
from google.protobuf import field_mask_pb2

from tests.conftest import GatewayFactory
from tests.e2e.clients import clients
from tests.e2e.test_push import Endpoint, Received
from tests.gateways import GatewayProcess

pytestmark = pytest.mark.integration
METADATA_ENDPOINTS = [
    "http://169.254.169.254/computeMetadata/v1/instance/service-accounts/default/token",
    "http://0xa9fea9fe/latest/meta-data/",
    "http://2852039166/",
    "http://169.254.43518/",
    "http://[::ffff:169.254.169.254]/",
    "http://[::ffff:a9fe:a9fe]:80/",
    "http://\uff11\uff16\uff19\uff0e\uff12\uff15\uff14\uff0e\uff11\uff16\uff19\uff0e\uff12\uff15\uff14/",
    "http://user:pw@169.254.169.254/",
    "http://[fe80::1%25eth0]/",
    "http://0.0.0.0:8080/",
]


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    with Endpoint() as ep:
        yield ep


def _log(gw: GatewayProcess) -> str:
    return "".join(p.read_text(errors="replace") for p in gw.log_paths if p.exists())


def _await_log(gw: GatewayProcess, found: Callable[[str], bool], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while True:
        text = _log(gw)
        if found(text) or time.monotonic() > deadline:
            return text
        time.sleep(0.2)


def test_metadata_addresses_are_refused_in_every_spelling_and_change_nothing(
    shared_gateway: GatewayProcess, names: Callable[..., str]
) -> None:
    """Under the default policy: no CreateSubscription, UpdateSubscription or ModifyPushConfig
    can point a subscription at the cloud metadata address."""
    pub, sub = clients(shared_gateway)
    topic, pulled = names("topics"), names("subscriptions", "-pull")
    pub.create_topic(name=topic)
    sub.create_subscription(name=pulled, topic=topic)
    for i, url in enumerate(METADATA_ENDPOINTS):
        name = names("subscriptions", f"-{i}")
        with pytest.raises(exceptions.InvalidArgument) as caught:
            sub.create_subscription(
                request={"name": name, "topic": topic, "push_config": {"push_endpoint": url}}
            )
        assert "never a push destination" in caught.value.message, caught.value.message
        assert ":pw@" not in caught.value.message
        with pytest.raises(exceptions.NotFound):
            sub.get_subscription(subscription=name)
        with pytest.raises(exceptions.InvalidArgument):
            sub.modify_push_config(request={"subscription": pulled, "push_config": {"push_endpoint": url}})
        with pytest.raises(exceptions.InvalidArgument):
            sub.update_subscription(
                request={
                    "subscription": {"name": pulled, "push_config": {"push_endpoint": url}},
                    "update_mask": field_mask_pb2.FieldMask(paths=["push_config"]),
                }
            )
    with pytest.raises(exceptions.InvalidArgument, match="http or https URL"):  # urllib's host is 169.254...
        sub.modify_push_config(
            request={
                "subscription": pulled,
                "push_config": {"push_endpoint": "http://evil\\@169.254.169.254/"},
            }
        )  # ... and aiohttp's yarl refuses it
    assert sub.get_subscription(subscription=pulled).push_config.push_endpoint == "", "nothing changed"
    assert list(pub.list_topic_subscriptions(topic=topic)) == [pulled]


def test_public_refuses_loopback_even_behind_a_name_and_keeps_the_messages(
    start_gateway: GatewayFactory, names: Callable[..., str], endpoint: Endpoint
) -> None:
    """--push-destinations public: a loopback literal is refused at create; `localhost` is a name,
    accepted, and refused when pushing because it resolves to 127.0.0.1. The messages stay in the
    subscription, and a gateway with the default policy then delivers every one of them."""
    prefix = f"dest{uuid.uuid4().hex[:6]}"
    strict = start_gateway("--push-destinations", "public", prefix=prefix)
    pub, sub = clients(strict)
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(name=topic)
    for url in (
        endpoint.url(),
        f"http://[::1]:{endpoint.port}/push",
        f"http://0x7f000001:{endpoint.port}/",
        f"http://10.0.0.1:{endpoint.port}/",
        f"http://100.64.0.1:{endpoint.port}/",
    ):
        with pytest.raises(exceptions.InvalidArgument) as caught:
            sub.create_subscription(
                request={"name": subscription, "topic": topic, "push_config": {"push_endpoint": url}}
            )
        assert "--push-destinations public" in caught.value.message, caught.value.message
    by_name = f"http://localhost:{endpoint.port}/push"
    sub.create_subscription(
        request={"name": subscription, "topic": topic, "push_config": {"push_endpoint": by_name}}
    )
    datas = [f"kept{i}".encode() for i in range(3)]
    for f in [pub.publish(topic, d) for d in datas]:
        f.result(timeout=30)

    def warned(text: str) -> bool:
        return f"{subscription}: push to {by_name} refused by the push destination policy" in text

    text = _await_log(strict, warned, 30)
    assert warned(text), text[-3000:]
    assert "localhost resolves to 127.0.0.1, which is loopback" in text
    time.sleep(2.0)  # the backoff retries a few times meanwhile: still nothing reaches the endpoint
    assert endpoint.requests == []
    refusals = [
        line for line in _log(strict).splitlines() if "refused by the push destination policy" in line
    ]
    assert len(refusals) == 1, "rate-limited: one warning a minute"
    assert strict.terminate() == 0

    relaxed = start_gateway(prefix=prefix)
    assert endpoint.wait(lambda rs: {r.data for r in rs} >= set(datas), 60), endpoint.requests
    assert "push destination policy" not in _log(relaxed)


def test_credentials_in_endpoint_urls_never_reach_the_logs(
    shared_gateway: GatewayProcess, names: Callable[..., str], endpoint: Endpoint
) -> None:
    secret, token = f"S3cret{uuid.uuid4().hex[:8]}", f"T0ken{uuid.uuid4().hex[:8]}"
    answers = iter([500])
    endpoint.answer = lambda _: (next(answers, 200), 0.0)  # one failure: its warning names the endpoint
    pub, sub = clients(shared_gateway)
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(name=topic)
    url = f"http://pusher:{secret}@127.0.0.1:{endpoint.port}/push?token={token}"
    sub.create_subscription(
        request={"name": subscription, "topic": topic, "push_config": {"push_endpoint": url}}
    )
    pub.publish(topic, b"secretive").result(timeout=30)
    assert endpoint.wait(lambda rs: len(rs) >= 2, 30)
    first: Received = endpoint.requests[0]
    assert first.headers["Authorization"] == "Basic " + base64.b64encode(f"pusher:{secret}".encode()).decode()
    for bad in (
        f"ftp://pusher:{secret}@127.0.0.1/?token={token}",
        f"http://pusher:{secret}@169.254.169.254/",
    ):
        with pytest.raises(exceptions.InvalidArgument) as caught:
            sub.modify_push_config(
                request={"subscription": subscription, "push_config": {"push_endpoint": bad}}
            )
        assert secret not in caught.value.message and token not in caught.value.message
        assert "***@" in caught.value.message
    masked = f"http://***@127.0.0.1:{endpoint.port}/push?token=***"
    text = _await_log(shared_gateway, lambda t: f"{subscription}: push to {masked} failed" in t, 10)
    assert f"{subscription}: pushing to {masked}" in text
    assert f"{subscription}: push to {masked} failed (HTTP 500)" in text
    assert secret not in text and token not in text
