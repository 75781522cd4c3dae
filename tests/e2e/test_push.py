"""Push subscriptions: a gateway subprocess POSTs to aiohttp endpoints running in this process.

Subscriptions are created and messages published with the official client; each endpoint runs
on 127.0.0.1 port 0 in a thread of its own (the client's calls block) and answers as told.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import itertools
import json
import re
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import grpc
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.api_core import exceptions
from google.cloud import pubsub_v1
from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport
from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

from tests.conftest import GatewayFactory
from tests.doc_examples import example
from tests.e2e.clients import clients, pull_until
from tests.e2e.pki import Pki
from tests.gateways import GatewayProcess, emulator_env

pytestmark = pytest.mark.integration
RFC3339_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
Answer = Callable[["Received"], tuple[int, float]]  # -> (status, seconds to wait before answering)


@dataclasses.dataclass(frozen=True)
class Received:
    at: float
    path: str
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> dict[str, object]:
        return dict(json.loads(self.body))

    @property
    def message(self) -> dict[str, object]:
        return dict(self.json()["message"])  # type: ignore[call-overload]

    @property
    def data(self) -> bytes:
        return base64.b64decode(str(self.message["data"]))


def _always_ok(_: Received) -> tuple[int, float]:
    return 200, 0.0


class Endpoint:
    """An HTTP endpoint in its own thread; `down()` stops listening, `up()` listens again."""

    def __init__(self, answer: Answer = _always_ok) -> None:
        self.answer = answer
        self.requests: list[Received] = []
        self._cond = threading.Condition()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: object = None
        self.port = 0

    def url(self, path: str = "/push") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def _call(self, coro: object) -> object:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(20)  # type: ignore[arg-type]

    def up(self) -> None:
        self._call(self._listen())

    def down(self) -> None:
        self._call(self._close())

    async def _listen(self) -> None:
        from aiohttp import web

        app = web.Application()
        app.router.add_post("/{path:.*}", self._handle)
        runner = web.AppRunner(app, shutdown_timeout=0.5, handler_cancellation=True)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()
        self.port = int(runner.addresses[0][1])
        self._runner = runner

    async def _close(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()  # type: ignore[attr-defined]

    async def _handle(self, request: object) -> object:
        from aiohttp import web

        assert isinstance(request, web.Request)
        got = Received(time.monotonic(), request.path, dict(request.headers), await request.read())
        with self._cond:
            self.requests.append(got)
            self._cond.notify_all()
            status, delay = self.answer(got)
        if delay:
            await asyncio.sleep(delay)
        return web.Response(status=status)

    def wait(self, done: Callable[[list[Received]], bool], timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: done(self.requests), timeout)

    def __enter__(self) -> Endpoint:
        self._thread.start()
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    with Endpoint() as ep:
        yield ep


def _make(
    gw: GatewayProcess, names: Callable[..., str], push_config: dict[str, object], **fields: object
) -> tuple[pubsub_v1.PublisherClient, pubsub_v1.SubscriberClient, str, str]:
    pub, sub = clients(gw)
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(name=topic)
    sub.create_subscription(
        request={"name": subscription, "topic": topic, "push_config": push_config, **fields}
    )
    return pub, sub, topic, subscription


def _publish(pub: pubsub_v1.PublisherClient, topic: str, datas: list[bytes], **attrs: str) -> list[str]:
    return [f.result(timeout=30) for f in [pub.publish(topic, d, **attrs) for d in datas]]


def _acked(reqs: list[Received]) -> set[bytes]:
    return {r.data for r in reqs}


def test_every_message_reaches_the_endpoint_once(
    shared_gateway: GatewayProcess, names: Callable[..., str], endpoint: Endpoint
) -> None:
    pub, _, topic, subscription = _make(shared_gateway, names, {"push_endpoint": endpoint.url()})
    datas = [f"m{i}".encode() for i in range(100)]
    ids = _publish(pub, topic, datas, color="red")
    assert endpoint.wait(lambda rs: len(_acked(rs)) == 100, 60), len(endpoint.requests)
    assert not endpoint.wait(lambda rs: len(rs) > 100, 4.0), "no message is pushed twice"
    by_data = {r.data: r for r in endpoint.requests}
    first = by_data[b"m0"]
    assert first.headers["Content-Type"] == "application/json"
    assert "Authorization" not in first.headers
    assert first.json()["subscription"] == subscription
    assert "deliveryAttempt" not in first.json(), "only with a dead-letter policy"
    message = first.message
    assert message["messageId"] == message["message_id"] == ids[0]
    assert message["publishTime"] == message["publish_time"]
    assert RFC3339_MS.fullmatch(str(message["publishTime"]))
    assert message["attributes"] == {"color": "red"}
    assert "orderingKey" not in message


def test_nacks_and_errors_redeliver_with_growing_delays(
    shared_gateway: GatewayProcess, names: Callable[..., str], endpoint: Endpoint
) -> None:
    statuses = iter([500, 400, 503, 500, 200])
    endpoint.answer = lambda _: (next(statuses, 200), 0.0)
    pub, _ = clients(shared_gateway)
    dead = names("topics", "-dead")
    pub.create_topic(name=dead)
    pub, _, topic, _ = _make(
        shared_gateway,
        names,
        {"push_endpoint": endpoint.url()},
        dead_letter_policy={"dead_letter_topic": dead, "max_delivery_attempts": 10},
    )
    _publish(pub, topic, [b"retry-me"])
    assert endpoint.wait(lambda rs: len(rs) >= 5, 30), [r.at for r in endpoint.requests]
    assert not endpoint.wait(lambda rs: len(rs) > 5, 2.0), "acked on the fifth attempt"
    reqs = endpoint.requests
    assert [r.json()["deliveryAttempt"] for r in reqs] == [1, 2, 3, 4, 5]
    gaps = [b.at - a.at for a, b in itertools.pairwise(reqs)]
    for i, gap in enumerate(gaps):  # the push backoff: 0.1 s, doubling per failure
        assert gap >= 0.1 * 2**i * 0.9, gaps
    assert gaps[-1] > gaps[0], gaps


def test_an_endpoint_slower_than_the_deadline_gets_the_message_again(
    shared_gateway: GatewayProcess, names: Callable[..., str], endpoint: Endpoint
) -> None:
    answers = iter([(200, 12.0)])
    endpoint.answer = lambda _: next(answers, (200, 0.0))
    pub, _, topic, _ = _make(
        shared_gateway, names, {"push_endpoint": endpoint.url()}, ack_deadline_seconds=10
    )
    _publish(pub, topic, [b"slow"])
    assert endpoint.wait(lambda rs: len(rs) >= 2, 30)
    first, second = endpoint.requests[:2]
    assert first.message["messageId"] == second.message["messageId"]
    assert 9.0 <= second.at - first.at < 14.0
    assert not endpoint.wait(lambda rs: len(rs) > 2, 3.0), "the second push was acked"


def _discovery(gw: GatewayProcess) -> dict[str, str]:
    with urllib.request.urlopen(
        f"http://{gw.rest_address}/.well-known/openid-configuration", timeout=10
    ) as r:
        return dict(json.loads(r.read()))


def test_tokens_verify_against_the_published_key_set(
    shared_gateway: GatewayProcess, names: Callable[..., str], endpoint: Endpoint
) -> None:
    email, audience = "pusher@test-project.iam.gserviceaccount.com", "https://example.test/aud"
    pub, sub, topic, _ = _make(
        shared_gateway,
        names,
        {
            "push_endpoint": endpoint.url("/a"),
            "oidc_token": {"service_account_email": email, "audience": audience},
        },
    )
    sub.create_subscription(
        request={
            "name": names("subscriptions", "-b"),
            "topic": topic,
            "push_config": {
                "push_endpoint": endpoint.url("/b"),
                "oidc_token": {"service_account_email": email},
            },
        }
    )
    _publish(pub, topic, [b"one", b"two"])
    assert endpoint.wait(lambda rs: len(rs) >= 4, 30)
    tokens = {
        path: {
            r.headers["Authorization"].removeprefix("Bearer ") for r in endpoint.requests if r.path == path
        }
        for path in ("/a", "/b")
    }
    assert len(tokens["/a"]) == len(tokens["/b"]) == 1, "tokens are cached, not signed per message"
    (token_a,), (token_b,) = tokens["/a"], tokens["/b"]
    config = _discovery(shared_gateway)
    key = jwt.PyJWKClient(config["jwks_uri"]).get_signing_key_from_jwt(token_a).key
    claims = jwt.decode(token_a, key, algorithms=["RS256"], audience=audience, issuer=config["issuer"])
    assert claims["email"] == claims["sub"] == email
    assert claims["email_verified"] is True
    assert claims["exp"] - claims["iat"] == 3600
    assert abs(claims["iat"] - time.time()) < 120
    claims_b = jwt.decode(token_b, key, algorithms=["RS256"], audience=endpoint.url("/b"))
    assert claims_b["email"] == email, "the audience defaults to the endpoint URL"
    with pytest.raises(jwt.InvalidAudienceError):
        jwt.decode(token_a, key, algorithms=["RS256"], audience="https://someone.else")
    forger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode(
        claims, forger, algorithm="RS256", headers={"kid": jwt.get_unverified_header(token_a)["kid"]}
    )
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(forged, key, algorithms=["RS256"], audience=audience)


def test_the_verification_example_of_the_push_doc_accepts_a_real_push(
    shared_gateway: GatewayProcess, names: Callable[..., str], endpoint: Endpoint
) -> None:
    """docs/push.md's PyJWT snippet, run on a request the gateway pushed, with the gateway's own
    address in place of `http://gateway:8085`; it must accept the token and return its claims."""
    email, audience = "pusher@my-project.iam.gserviceaccount.com", "https://my-endpoint.example/push"
    pub, _, topic, _ = _make(
        shared_gateway,
        names,
        {
            "push_endpoint": endpoint.url(),
            "oidc_token": {"service_account_email": email, "audience": audience},
        },
    )
    _publish(pub, topic, [b"verified"])
    assert endpoint.wait(lambda rs: len(rs) >= 1, 30)
    code = example("docs/push.md", "push-verify-jwt").replace(
        "http://gateway:8085", f"http://{shared_gateway.rest_address}"
    )
    assert _discovery(shared_gateway)["issuer"] == f"http://{shared_gateway.rest_address}"
    namespace: dict[str, object] = {"request": endpoint.requests[0]}
    exec(compile(code, "docs/push.md", "exec"), namespace)
    claims = namespace["claims"]
    assert isinstance(claims, dict) and claims["email"] == email and claims["aud"] == audience


def test_no_wrapper_sends_raw_data_and_metadata_headers(
    shared_gateway: GatewayProcess, names: Callable[..., str], endpoint: Endpoint
) -> None:
    _, sub, topic, with_meta = _make(
        shared_gateway,
        names,
        {"push_endpoint": endpoint.url("/meta"), "no_wrapper": {"write_metadata": True}},
    )
    sub.create_subscription(
        request={
            "name": names("subscriptions", "-raw"),
            "topic": topic,
            "push_config": {"push_endpoint": endpoint.url("/raw"), "no_wrapper": {"write_metadata": False}},
        }
    )
    with emulator_env(shared_gateway.address):
        pub = pubsub_v1.PublisherClient(
            publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True)
        )
    data = b"raw \x00\xff bytes"
    mid = pub.publish(topic, data, ordering_key="k1", color="red", **{"bad key": "x"}).result(timeout=30)
    assert endpoint.wait(lambda rs: len(rs) >= 2, 30)
    meta = next(r for r in endpoint.requests if r.path == "/meta")
    raw = next(r for r in endpoint.requests if r.path == "/raw")
    assert meta.body == raw.body == data
    assert meta.headers["x-goog-pubsub-subscription-name"] == with_meta
    assert meta.headers["x-goog-pubsub-message-id"] == mid
    assert RFC3339_MS.fullmatch(meta.headers["x-goog-pubsub-publish-time"])
    assert meta.headers["x-goog-pubsub-ordering-key"] == "k1"
    assert meta.headers["color"] == "red"
    assert "bad key" not in {h.lower() for h in meta.headers}, "not a valid header name"
    assert not any(h.lower().startswith("x-goog-pubsub") or h == "color" for h in raw.headers)


def test_switching_push_to_pull_and_back(
    shared_gateway: GatewayProcess, names: Callable[..., str], endpoint: Endpoint
) -> None:
    pub, sub, topic, subscription = _make(shared_gateway, names, {"push_endpoint": endpoint.url()})
    _publish(pub, topic, [f"a{i}".encode() for i in range(5)])
    assert endpoint.wait(lambda rs: len(_acked(rs)) == 5, 30)
    sub.modify_push_config(request={"subscription": subscription, "push_config": {}})
    _publish(pub, topic, [f"b{i}".encode() for i in range(5)])
    pulled = pull_until(sub, subscription, 5, timeout=30)
    assert sorted(m.message.data for m in pulled) == [f"b{i}".encode() for i in range(5)]
    sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in pulled])
    sub.modify_push_config(
        request={"subscription": subscription, "push_config": {"push_endpoint": endpoint.url()}}
    )
    _publish(pub, topic, [f"c{i}".encode() for i in range(5)])
    assert endpoint.wait(lambda rs: len(_acked(rs)) == 10, 30)
    assert not endpoint.wait(lambda rs: len(rs) > 10, 2.0)
    assert sorted(_acked(endpoint.requests)) == sorted(f"{c}{i}".encode() for c in "ac" for i in range(5))


def test_a_dead_endpoint_costs_bounded_retries_and_loses_nothing(
    shared_gateway: GatewayProcess, names: Callable[..., str], endpoint: Endpoint
) -> None:
    failing = threading.Event()
    failing.set()
    endpoint.answer = lambda _: (503 if failing.is_set() else 200, 0.0)
    pub, _, topic, _ = _make(shared_gateway, names, {"push_endpoint": endpoint.url()})
    datas = [f"d{i}".encode() for i in range(30)]
    _publish(pub, topic, datas)
    assert endpoint.wait(lambda rs: len(rs) >= 1, 30)
    time.sleep(4.0)  # the endpoint answers 503 for a while
    assert len(endpoint.requests) <= 20, "backoff and a shrunken window bound the retries"
    endpoint.down()  # then refuses connections for a while
    time.sleep(3.0)
    failing.clear()
    endpoint.up()
    t0 = time.monotonic()
    assert endpoint.wait(lambda rs: _acked([r for r in rs if r.at > t0]) == set(datas), 45)


def _kids(gw: GatewayProcess) -> set[str]:
    with urllib.request.urlopen(f"http://{gw.rest_address}/oauth2/v3/certs", timeout=10) as r:
        return {k["kid"] for k in json.loads(r.read())["keys"]}


def test_two_processes_share_the_work_and_the_keys(
    start_gateway: GatewayFactory, names: Callable[..., str], endpoint: Endpoint
) -> None:
    prefix = f"push{uuid.uuid4().hex[:6]}"
    a, b = start_gateway(prefix=prefix), start_gateway(prefix=prefix)
    assert _kids(a) == _kids(b) != set(), "every process signs with and publishes the same keys"
    pub, _, topic, _ = _make(a, names, {"push_endpoint": endpoint.url()})
    first = [f"x{i}".encode() for i in range(200)]
    _publish(pub, topic, first)
    assert endpoint.wait(lambda rs: _acked(rs) == set(first), 60)
    assert not endpoint.wait(lambda rs: len(rs) > 200, 3.0), "two processes never push one message twice"
    a.kill()  # B takes over every partition
    pub_b, _ = clients(b)
    second = [f"y{i}".encode() for i in range(100)]
    _publish(pub_b, topic, second)
    assert endpoint.wait(lambda rs: _acked(rs) >= set(first) | set(second), 60)


def test_a_configured_key_file_signs(start_gateway: GatewayFactory, tmp_path: Path) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = tmp_path / "push-key.pem"
    pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    gw = start_gateway("--push-auth-key-file", str(pem), "--push-auth-issuer", "https://issuer.test")
    assert _discovery(gw)["issuer"] == "https://issuer.test"
    with urllib.request.urlopen(f"http://{gw.rest_address}/oauth2/v3/certs", timeout=10) as r:
        (jwk,) = json.loads(r.read())["keys"]
    assert jwt.PyJWK(jwk).key.public_numbers() == key.public_key().public_numbers()


def test_push_endpoints_must_be_http_urls(shared_gateway: GatewayProcess, names: Callable[..., str]) -> None:
    pub, sub = clients(shared_gateway)
    topic = names("topics")
    pub.create_topic(name=topic)
    with pytest.raises(exceptions.InvalidArgument):
        sub.create_subscription(
            request={
                "name": names("subscriptions"),
                "topic": topic,
                "push_config": {"push_endpoint": "ftp://example.test/x"},
            }
        )


def test_with_ordering_each_key_is_pushed_in_order_and_restarts_after_a_failure(
    shared_gateway: GatewayProcess, names: Callable[..., str], endpoint: Endpoint
) -> None:
    """One push per key at a time, in order; a failed push of message i brings i and every later
    message of its key again, in order."""
    failed: set[str] = set()
    lock = threading.Lock()

    def answer(r: Received) -> tuple[int, float]:
        key, index = r.data.decode().split(":")
        with lock:
            fail = index == "10" and key not in failed
            if fail:
                failed.add(key)
        return (500 if fail else 200), 0.02

    endpoint.answer = answer
    with emulator_env(shared_gateway.address):
        pub = pubsub_v1.PublisherClient(
            publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True)
        )
    _, _, topic, _ = _make(
        shared_gateway, names, {"push_endpoint": endpoint.url()}, enable_message_ordering=True
    )
    futures = [
        pub.publish(topic, f"k{k}:{i}".encode(), ordering_key=f"k{k}") for i in range(30) for k in range(3)
    ]
    for f in futures:
        f.result(timeout=30)

    def done(rs: list[Received]) -> bool:
        last = {k: [r.data for r in rs if r.data.startswith(b"k%d:" % k)] for k in range(3)}
        return all(v and v[-1] == b"k%d:29" % k and len(failed) == 3 for k, v in last.items())

    assert endpoint.wait(done, 60), [r.data for r in endpoint.requests]
    time.sleep(1)
    for k in range(3):
        order = [int(r.data.split(b":")[1]) for r in endpoint.requests if r.data.startswith(b"k%d:" % k)]
        # Pushed concurrently, 11 and later would reach the endpoint before 10 failed.
        assert order == [*range(11), *range(10, 30)], f"k{k}: {order}"


def test_push_with_tls_and_authentication_on(
    start_gateway: GatewayFactory, names: Callable[..., str], endpoint: Endpoint, tmp_path: Path
) -> None:
    """Push goes on when the gateway takes TLS and authenticated callers only: the endpoint
    gets the messages, and verifies their tokens with the key set served over HTTPS."""
    pki = Pki(tmp_path)
    tokens, policy = tmp_path / "tokens", tmp_path / "iam.json"
    tokens.write_text("admin-token user:admin@example.com\n")
    admin = {"role": "roles/pubsub.admin", "members": ["user:admin@example.com"]}
    policy.write_text(json.dumps({"projects/test-project": {"bindings": [admin]}}))
    gw = start_gateway(*pki.flags(), "--auth-token-file", str(tokens), "--iam-policy-file", str(policy))
    credentials = grpc.composite_channel_credentials(
        grpc.ssl_channel_credentials(root_certificates=pki.ca.cert),
        grpc.access_token_call_credentials("admin-token"),  # authorization: Bearer admin-token
    )
    pub = pubsub_v1.PublisherClient(
        transport=PublisherGrpcTransport(channel=grpc.secure_channel(gw.address, credentials))
    )
    sub = pubsub_v1.SubscriberClient(
        transport=SubscriberGrpcTransport(channel=grpc.secure_channel(gw.address, credentials))
    )
    topic, subscription = names("topics"), names("subscriptions")
    pub.create_topic(name=topic)
    email = "pusher@test-project.iam.gserviceaccount.com"
    sub.create_subscription(
        request={
            "name": subscription,
            "topic": topic,
            "push_config": {"push_endpoint": endpoint.url(), "oidc_token": {"service_account_email": email}},
        }
    )
    _publish(pub, topic, [b"one", b"two"])
    assert endpoint.wait(lambda rs: _acked(rs) == {b"one", b"two"}, 30)

    context = pki.context()
    with urllib.request.urlopen(
        f"https://{gw.rest_address}/.well-known/openid-configuration", timeout=10, context=context
    ) as r:
        config = json.loads(r.read())
    assert config["issuer"].startswith("https://")
    token = endpoint.requests[0].headers["Authorization"].removeprefix("Bearer ")
    key = jwt.PyJWKClient(config["jwks_uri"], ssl_context=context).get_signing_key_from_jwt(token).key
    claims = jwt.decode(token, key, algorithms=["RS256"], audience=endpoint.url(), issuer=config["issuer"])
    assert claims["email"] == email
