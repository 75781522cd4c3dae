"""IAM policies and their enforcement, end to end: the official Python client over gRPC, plain
HTTP for REST, a gateway subprocess on the suite's stock-settings broker.

Without authentication the gateway stores and returns policies but enforces none. With a
token file it knows who calls, and every call needs the permissions the API documents, granted
through the project's bindings (--iam-policy-file) or the resource's own policy.
"""

from __future__ import annotations

import base64
import http.server
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import jwt
import pytest
import requests
from cryptography.hazmat.primitives.asymmetric import rsa
from google.api_core import exceptions
from google.cloud import pubsub_v1
from google.iam.v1 import iam_policy_pb2, policy_pb2
from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport
from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

from tests.conftest import GatewayFactory
from tests.e2e.clients import (
    await_subscription,
    clients,
    exactly_once_backlog,
    pull_nothing,
    pull_until,
    topic_and_subscription,
)
from tests.gateways import GatewayProcess

PROJECT = "projects/test-project"
TOKENS = {
    "t-admin": "user:admin@example.com",
    "t-editor": "user:editor@example.com",
    "t-publisher": "user:publisher@example.com",
    "t-subscriber": "user:subscriber@example.com",
    "t-viewer": "serviceAccount:viewer@test-project.iam.gserviceaccount.com",
    "t-nobody": "user:nobody@example.com",
    "t-topic-publisher": "user:topic-publisher@example.com",
}
PROJECT_ROLES = {
    "roles/pubsub.admin": ["user:admin@example.com"],
    "roles/pubsub.editor": ["user:editor@example.com"],
    "roles/pubsub.publisher": ["user:publisher@example.com"],
    "roles/pubsub.subscriber": ["user:subscriber@example.com"],
    "roles/pubsub.viewer": ["serviceAccount:viewer@test-project.iam.gserviceaccount.com"],
}


# -- without authentication: stored and returned, not enforced ------------------------------


def test_policies_are_stored_returned_and_versioned(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    pub, sub, topic, subscription = topic_and_subscription(shared_gateway, names)

    empty = pub.get_iam_policy(request={"resource": topic})
    assert list(empty.bindings) == [] and empty.etag

    empty.bindings.add(role="roles/pubsub.publisher", members=["user:b@example.com", "user:a@example.com"])
    empty.bindings.add(role="roles/pubsub.viewer", members=["domain:example.com"])
    stored = pub.set_iam_policy(request={"resource": topic, "policy": empty})
    assert stored.etag and stored.etag != empty.etag
    again = pub.get_iam_policy(request={"resource": topic})
    assert again.bindings == stored.bindings and again.etag == stored.etag
    by_role = {b.role: list(b.members) for b in again.bindings}
    assert by_role == {
        "roles/pubsub.publisher": ["user:a@example.com", "user:b@example.com"],
        "roles/pubsub.viewer": ["domain:example.com"],
    }

    # A write based on a policy read before the last change is refused: read-modify-write.
    with pytest.raises(exceptions.Aborted):
        pub.set_iam_policy(request={"resource": topic, "policy": empty})
    assert pub.get_iam_policy(request={"resource": topic}).etag == stored.etag

    # Each resource has its own; a subscription's is independent of its topic's.
    assert list(sub.get_iam_policy(request={"resource": subscription}).bindings) == []

    # Updating the topic keeps its policy; deleting it deletes the policy too.
    pub.update_topic(
        request={"topic": {"name": topic, "labels": {"k": "v"}}, "update_mask": {"paths": ["labels"]}}
    )
    assert pub.get_iam_policy(request={"resource": topic}).bindings == stored.bindings
    pub.delete_topic(topic=topic)
    with pytest.raises(exceptions.NotFound):
        pub.get_iam_policy(request={"resource": topic})
    pub.create_topic(name=topic)
    assert list(pub.get_iam_policy(request={"resource": topic}).bindings) == []

    # Without authentication nothing is enforced: the caller holds every permission asked.
    held = pub.test_iam_permissions(
        request={"resource": topic, "permissions": ["pubsub.topics.publish", "pubsub.topics.delete"]}
    )
    assert list(held.permissions) == ["pubsub.topics.publish", "pubsub.topics.delete"]


def test_bad_policies_are_refused_and_change_nothing(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    pub, _ = clients(shared_gateway)
    topic = names("topics")
    pub.create_topic(name=topic)
    before = pub.get_iam_policy(request={"resource": topic})
    bad_policies = [
        policy_pb2.Policy(bindings=[policy_pb2.Binding(role="roles/no.such.role", members=["user:a@b.com"])]),
        policy_pb2.Policy(bindings=[policy_pb2.Binding(role="roles/pubsub.viewer", members=["nonsense"])]),
        policy_pb2.Policy(
            bindings=[
                policy_pb2.Binding(
                    role="roles/pubsub.viewer", members=["user:a@b.com"], condition={"expression": "true"}
                )
            ]
        ),
    ]
    for policy in bad_policies:
        with pytest.raises(exceptions.InvalidArgument):
            pub.set_iam_policy(request={"resource": topic, "policy": policy})
    with pytest.raises(exceptions.NotFound):
        pub.get_iam_policy(request={"resource": names("topics", "-missing")})
    with pytest.raises(exceptions.NotFound):
        pub.set_iam_policy(request={"resource": names("topics", "-missing"), "policy": before})
    after = pub.get_iam_policy(request={"resource": topic})
    assert after.etag == before.etag and list(after.bindings) == []


def test_iam_over_rest(shared_gateway: GatewayProcess, names: Callable[[str], str]) -> None:
    pub, _, topic, subscription = topic_and_subscription(shared_gateway, names)
    base = f"http://{shared_gateway.rest_address}/v1"
    for resource in (topic, subscription):
        got = requests.get(f"{base}/{resource}:getIamPolicy", timeout=10)
        assert got.status_code == 200, got.text
        etag = got.json()["etag"]
        policy = {"bindings": [{"role": "roles/pubsub.subscriber", "members": ["user:r@example.com"]}]}
        put = requests.post(
            f"{base}/{resource}:setIamPolicy", json={"policy": {**policy, "etag": etag}}, timeout=10
        )
        assert put.status_code == 200, put.text
        assert put.json()["bindings"] == policy["bindings"]
        stale = requests.post(
            f"{base}/{resource}:setIamPolicy", json={"policy": {**policy, "etag": etag}}, timeout=10
        )
        assert stale.status_code == 409 and stale.json()["error"]["status"] == "ABORTED", stale.text
        versioned = requests.get(
            f"{base}/{resource}:getIamPolicy", params={"options.requestedPolicyVersion": 3}, timeout=10
        )
        assert versioned.json()["bindings"] == policy["bindings"]
        tested = requests.post(
            f"{base}/{resource}:testIamPermissions",
            json={"permissions": ["pubsub.subscriptions.consume"] if resource == subscription else []},
            timeout=10,
        )
        assert tested.status_code == 200, tested.text
    # And what the gRPC client reads is what REST wrote.
    assert [b.role for b in pub.get_iam_policy(request={"resource": topic}).bindings] == [
        "roles/pubsub.subscriber"
    ]


def test_the_forwarded_mark_cannot_be_set_by_a_client(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    """The mark that tells an owner an ack was forwarded by another process (so it must not
    forward it again) is a signed token; a client that sets it is refused."""
    _, sub, _, subscription = topic_and_subscription(shared_gateway, names)
    for value in ("1", "forged.jwt.value"):
        with pytest.raises(exceptions.PermissionDenied, match="x-pubsub-gateway-forwarded"):
            sub.acknowledge(
                subscription=subscription,
                ack_ids=["x"],
                metadata=[("x-pubsub-gateway-forwarded", value)],
            )


# -- with authentication: every call is checked -----------------------------------------------


class _Metadata(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
    grpc.StreamUnaryClientInterceptor,  # type: ignore[misc]
    grpc.StreamStreamClientInterceptor,  # type: ignore[misc]
):
    """Adds `authorization: Bearer <token>` to every call, as credentials would."""

    def __init__(self, token: str) -> None:
        self._pair = ("authorization", f"Bearer {token}")

    def _details(self, details: Any) -> Any:
        return details._replace(metadata=[*(details.metadata or ()), self._pair])

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)


def _as(
    gw: GatewayProcess, token: str | None
) -> tuple[pubsub_v1.PublisherClient, pubsub_v1.SubscriberClient]:
    def channel() -> grpc.Channel:
        plain = grpc.insecure_channel(gw.address)
        return plain if token is None else grpc.intercept_channel(plain, _Metadata(token))

    return (
        pubsub_v1.PublisherClient(transport=PublisherGrpcTransport(channel=channel())),
        pubsub_v1.SubscriberClient(transport=SubscriberGrpcTransport(channel=channel())),
    )


@pytest.fixture
def secured(start_gateway: GatewayFactory, tmp_path: Path) -> GatewayProcess:
    tokens = tmp_path / "tokens"
    tokens.write_text("# token member\n" + "".join(f"{t} {m}\n" for t, m in TOKENS.items()))
    policies = tmp_path / "iam.json"
    bindings = [{"role": role, "members": members} for role, members in PROJECT_ROLES.items()]
    policies.write_text(json.dumps({PROJECT: {"bindings": bindings}}))
    return start_gateway("--auth-token-file", str(tokens), "--iam-policy-file", str(policies))


def _outcome(call: Callable[[], object]) -> str:
    """ "ok" when the call got past authorization: it succeeded, or failed on its own request
    (acking the made-up id "x" is INVALID_ARGUMENT, but only for a caller who may ack)."""
    try:
        call()
    except exceptions.PermissionDenied:
        return "denied"
    except exceptions.Unauthenticated:
        return "unauthenticated"
    except exceptions.InvalidArgument:
        return "ok"
    return "ok"


def test_callers_must_authenticate(secured: GatewayProcess, names: Callable[[str], str]) -> None:
    for token in (None, "not-a-known-token"):
        pub, _ = _as(secured, token)
        with pytest.raises(exceptions.Unauthenticated):
            pub.list_topics(request={"project": PROJECT})
        got = requests.get(
            f"http://{secured.rest_address}/v1/{PROJECT}/topics",
            headers={} if token is None else {"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        assert got.status_code == 401 and got.json()["error"]["status"] == "UNAUTHENTICATED", got.text
    pub, _ = _as(secured, "t-admin")
    assert list(pub.list_topics(request={"project": PROJECT})) == []


def test_each_role_against_each_family_of_calls(secured: GatewayProcess, names: Callable[[str], str]) -> None:
    admin_pub, admin_sub = _as(secured, "t-admin")
    topic, subscription = names("topics"), names("subscriptions")
    admin_pub.create_topic(name=topic)
    admin_sub.create_subscription(name=subscription, topic=topic)

    def families(token: str) -> dict[str, str]:
        pub, sub = _as(secured, token)
        own = names("topics", f"-{token}")
        own_sub = names("subscriptions", f"-{token}")
        return {
            "create topic": _outcome(lambda: pub.create_topic(name=own)),
            "get topic": _outcome(lambda: pub.get_topic(topic=topic)),
            "list topics": _outcome(lambda: list(pub.list_topics(request={"project": PROJECT}))),
            "publish": _outcome(lambda: pub.publish(topic, b"m").result(timeout=30)),
            "attach subscription": _outcome(lambda: sub.create_subscription(name=own_sub, topic=topic)),
            "pull": _outcome(lambda: sub.pull(subscription=subscription, max_messages=1, timeout=10)),
            "acknowledge": _outcome(lambda: sub.acknowledge(subscription=subscription, ack_ids=["x"])),
            "get policy": _outcome(lambda: pub.get_iam_policy(request={"resource": topic})),
            "set policy": _outcome(
                lambda: pub.set_iam_policy(request={"resource": topic, "policy": policy_pb2.Policy()})
            ),
            "delete subscription": _outcome(lambda: sub.delete_subscription(subscription=own_sub)),
        }

    ok, no = "ok", "denied"
    # What Google's predefined roles hold (docs/security.md has the table).
    expected = {
        "t-admin": dict.fromkeys(families_names(), ok),
        "t-editor": {
            **dict.fromkeys(families_names(), ok),
            "get policy": no,
            "set policy": no,
        },
        "t-publisher": {**dict.fromkeys(families_names(), no), "publish": ok},
        "t-subscriber": {
            **dict.fromkeys(families_names(), no),
            "pull": ok,
            "acknowledge": ok,
        },
        "t-viewer": {
            **dict.fromkeys(families_names(), no),
            "get topic": ok,
            "list topics": ok,
        },
        "t-nobody": dict.fromkeys(families_names(), no),
    }
    for token, wanted in expected.items():
        assert families(token) == wanted, token


def families_names() -> list[str]:
    return [
        "create topic",
        "get topic",
        "list topics",
        "publish",
        "attach subscription",
        "pull",
        "acknowledge",
        "get policy",
        "set policy",
        "delete subscription",
    ]


def test_a_resource_policy_grants_on_that_resource_only(
    secured: GatewayProcess, names: Callable[[str], str]
) -> None:
    admin_pub, _ = _as(secured, "t-admin")
    granted, other = names("topics"), names("topics", "-other")
    for topic in (granted, other):
        admin_pub.create_topic(name=topic)
    policy = admin_pub.get_iam_policy(request={"resource": granted})
    policy.bindings.add(role="roles/pubsub.publisher", members=["user:topic-publisher@example.com"])
    admin_pub.set_iam_policy(request={"resource": granted, "policy": policy})

    pub, _ = _as(secured, "t-topic-publisher")
    assert pub.publish(granted, b"m").result(timeout=30)
    with pytest.raises(exceptions.PermissionDenied, match=r"pubsub\.topics\.publish"):
        pub.publish(other, b"m").result(timeout=30)
    with pytest.raises(exceptions.PermissionDenied, match=r"pubsub\.topics\.delete"):
        pub.delete_topic(topic=granted)
    held = pub.test_iam_permissions(
        request={"resource": granted, "permissions": ["pubsub.topics.publish", "pubsub.topics.delete"]}
    )
    assert list(held.permissions) == ["pubsub.topics.publish"]
    # Over REST too, with the same token and the same answers.
    base = f"http://{secured.rest_address}/v1"
    auth = {"Authorization": "Bearer t-topic-publisher"}
    body = {"messages": [{"data": "bQ=="}]}
    assert requests.post(f"{base}/{granted}:publish", json=body, headers=auth, timeout=10).status_code == 200
    denied = requests.post(f"{base}/{other}:publish", json=body, headers=auth, timeout=10)
    assert denied.status_code == 403 and "pubsub.topics.publish" in denied.json()["error"]["message"]
    tested = requests.post(
        f"{base}/{granted}:testIamPermissions",
        json={"permissions": ["pubsub.topics.publish", "pubsub.topics.update"]},
        headers=auth,
        timeout=10,
    )
    assert tested.json() == {"permissions": ["pubsub.topics.publish"]}


def test_streaming_pull_needs_consume(secured: GatewayProcess, names: Callable[[str], str]) -> None:
    admin_pub, admin_sub = _as(secured, "t-admin")
    topic, subscription = names("topics"), names("subscriptions")
    admin_pub.create_topic(name=topic)
    admin_sub.create_subscription(name=subscription, topic=topic)
    admin_pub.publish(topic, b"m").result(timeout=30)
    for token, works in (("t-publisher", False), ("t-subscriber", True)):
        _, sub = _as(secured, token)
        received: list[bytes] = []

        def callback(message: Any, into: list[bytes] = received) -> None:
            into.append(message.data)
            message.ack()

        future = sub.subscribe(subscription, callback)
        if works:
            deadline_hit = False
            try:
                future.result(timeout=10)
            except TimeoutError:
                deadline_hit = True
            except Exception as exc:
                pytest.fail(f"the subscriber's stream ended: {exc!r}")
            finally:
                future.cancel()
            assert deadline_hit and received == [b"m"]
        else:
            with pytest.raises(exceptions.PermissionDenied):
                future.result(timeout=30)
            assert received == []


def test_project_policy_file_is_checked_at_start(start_gateway: GatewayFactory, tmp_path: Path) -> None:
    bad = tmp_path / "iam.json"
    bad.write_text(json.dumps({PROJECT: {"bindings": [{"role": "roles/none", "members": ["user:a@b.c"]}]}}))
    with pytest.raises(RuntimeError, match="iam-policy-file"):
        start_gateway("--iam-policy-file", str(bad))


def test_permissions_requested_must_be_valid(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    pub, _ = clients(shared_gateway)
    topic = names("topics")
    pub.create_topic(name=topic)
    with pytest.raises(exceptions.InvalidArgument):
        pub.test_iam_permissions(request={"resource": topic, "permissions": ["pubsub.*"]})
    request = iam_policy_pb2.TestIamPermissionsRequest(resource=topic, permissions=["pubsub.topics.get"])
    assert list(pub.test_iam_permissions(request=request).permissions) == ["pubsub.topics.get"]


def test_rest_callers_get_the_same_answers_as_grpc(
    secured: GatewayProcess, names: Callable[[str], str]
) -> None:
    """The role matrix over REST: the same token, the same permission, the same outcome."""
    admin_pub, admin_sub = _as(secured, "t-admin")
    topic, subscription = names("topics"), names("subscriptions")
    admin_pub.create_topic(name=topic)
    admin_sub.create_subscription(name=subscription, topic=topic)
    base = f"http://{secured.rest_address}/v1"

    def outcomes(token: str) -> dict[str, int]:
        auth = {"Authorization": f"Bearer {token}"}

        def call(method: str, path: str, body: object = None) -> int:
            return requests.request(method, f"{base}/{path}", json=body, headers=auth, timeout=10).status_code

        return {
            "create topic": call("PUT", names("topics", f"-rest-{token}"), {}),
            "get topic": call("GET", topic),
            "list topics": call("GET", f"{PROJECT}/topics"),
            "publish": call("POST", f"{topic}:publish", {"messages": [{"data": "bQ=="}]}),
            "pull": call("POST", f"{subscription}:pull", {"maxMessages": 1, "returnImmediately": True}),
            "get policy": call("GET", f"{topic}:getIamPolicy"),
            "set policy": call("POST", f"{topic}:setIamPolicy", {"policy": {}}),
        }

    allowed = {
        "t-admin": {
            "create topic",
            "get topic",
            "list topics",
            "publish",
            "pull",
            "get policy",
            "set policy",
        },
        "t-editor": {"create topic", "get topic", "list topics", "publish", "pull"},
        "t-publisher": {"publish"},
        "t-subscriber": {"pull"},
        "t-viewer": {"get topic", "list topics"},
        "t-nobody": set(),
    }
    for token, may in allowed.items():
        got = outcomes(token)
        assert got == {call: 200 if call in may else 403 for call in got}, (token, got)


def test_forwarded_acks_need_no_second_authentication(
    start_gateway: GatewayFactory, names: Callable[[str], str], tmp_path: Path
) -> None:
    """Two processes, authentication on: an ack sent to the process that does not own the
    message's partition is checked there, then forwarded to the owner with the peer mark
    alone, and takes effect. A caller who may not consume is refused where it calls."""
    tokens, policy = tmp_path / "tokens", tmp_path / "iam.json"
    tokens.write_text("".join(f"{t} {m}\n" for t, m in TOKENS.items()))
    bindings = [{"role": role, "members": members} for role, members in PROJECT_ROLES.items()]
    policy.write_text(json.dumps({PROJECT: {"bindings": bindings}}))
    flags = ("--auth-token-file", str(tokens), "--iam-policy-file", str(policy))
    a = start_gateway(*flags)
    b = start_gateway(*flags, prefix=a.prefix)
    _, subscription = exactly_once_backlog(*_as(a, "t-admin"), names, 10)
    _, sub_a = _as(a, "t-subscriber")
    _, sub_b = _as(b, "t-subscriber")
    got = pull_until(sub_a, subscription, 10)  # a owns every partition: b never pulled
    assert len(got) == 10
    await_subscription(_as(b, "t-admin")[1], subscription)
    _, publisher_b = _as(b, "t-publisher")
    with pytest.raises(exceptions.PermissionDenied, match=r"pubsub\.subscriptions\.consume"):
        publisher_b.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in got])
    # Exactly-once: the call fails unless the owner confirmed every id, so the hop worked.
    sub_b.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in got])
    assert pull_nothing(sub_a, subscription, 12.0) == [], "acked, so nothing comes back after the deadline"


class _Issuer:
    """An OIDC issuer on 127.0.0.1: its discovery document and key set, served over HTTP."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        numbers = self.key.public_key().public_numbers()

        def b64(n: int) -> str:
            return (
                base64.urlsafe_b64encode(n.to_bytes((n.bit_length() + 7) // 8, "big")).rstrip(b"=").decode()
            )

        jwks = {
            "keys": [
                {
                    "kty": "RSA",
                    "kid": "k1",
                    "alg": "RS256",
                    "use": "sig",
                    "n": b64(numbers.n),
                    "e": b64(numbers.e),
                }
            ]
        }
        issuer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                documents = {
                    "/.well-known/openid-configuration": {
                        "issuer": issuer.url,
                        "jwks_uri": issuer.url + "/certs",
                    },
                    "/certs": jwks,
                }
                body = json.dumps(documents.get(self.path, {})).encode()
                self.send_response(200 if self.path in documents else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def token(self, key: rsa.RSAPrivateKey | None = None, **claims: object) -> str:
        now = int(time.time())
        body = {"iss": self.url, "aud": "gw-audience", "iat": now, "exp": now + 300, "sub": "s", **claims}
        return jwt.encode(body, key or self.key, algorithm="RS256", headers={"kid": "k1"})


def test_oidc_id_tokens(start_gateway: GatewayFactory, names: Callable[[str], str], tmp_path: Path) -> None:
    """Tokens of a configured OIDC issuer authenticate their `email`; expired ones, ones with a
    bad signature and ones for another audience are UNAUTHENTICATED, on both wires."""
    issuer = _Issuer()
    try:
        policy = tmp_path / "iam.json"
        admin = {
            "role": "roles/pubsub.admin",
            "members": ["serviceAccount:ci@test-project.iam.gserviceaccount.com"],
        }
        policy.write_text(json.dumps({PROJECT: {"bindings": [admin]}}))
        gw = start_gateway("--auth-oidc", f"{issuer.url}=gw-audience", "--iam-policy-file", str(policy))
        email = "ci@test-project.iam.gserviceaccount.com"
        good = issuer.token(email=email)
        pub, _ = _as(gw, good)
        topic = names("topics")
        pub.create_topic(name=topic)
        other = issuer.token(email="someone@example.com")
        with pytest.raises(exceptions.PermissionDenied, match=r"pubsub\.topics\.get"):
            _as(gw, other)[0].get_topic(topic=topic)
        stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        bad = {
            "expired": issuer.token(email=email, iat=int(time.time()) - 600, exp=int(time.time()) - 300),
            "bad signature": issuer.token(stranger, email=email),
            "another audience": issuer.token(email=email, aud="someone-else"),
        }
        for why, token in bad.items():
            with pytest.raises(exceptions.Unauthenticated):
                _as(gw, token)[0].get_topic(topic=topic)
            got = requests.get(
                f"http://{gw.rest_address}/v1/{topic}",
                headers={"Authorization": f"Bearer {token}"},
                timeout=10,
            )
            assert got.status_code == 401, (why, got.text)
        ok = requests.get(
            f"http://{gw.rest_address}/v1/{topic}", headers={"Authorization": f"Bearer {good}"}, timeout=10
        )
        assert ok.status_code == 200, ok.text
    finally:
        issuer.server.shutdown()
        issuer.server.server_close()  # its listening socket, else a ResourceWarning in a later test


def test_snapshots_have_policies_too(shared_gateway: GatewayProcess, names: Callable[[str], str]) -> None:
    _, sub, _, subscription = topic_and_subscription(shared_gateway, names)
    snapshot = names("snapshots")
    sub.create_snapshot(request={"name": snapshot, "subscription": subscription})
    policy = sub.get_iam_policy(request={"resource": snapshot})
    policy.bindings.add(role="roles/pubsub.subscriber", members=["user:s@example.com"])
    stored = sub.set_iam_policy(request={"resource": snapshot, "policy": policy})
    assert sub.get_iam_policy(request={"resource": snapshot}).bindings == stored.bindings
    policy.bindings.add(role="roles/pubsub.publisher", members=["user:p@example.com"])
    with pytest.raises(exceptions.InvalidArgument, match="not supported for this resource"):
        sub.set_iam_policy(request={"resource": snapshot, "policy": policy})
    # A schema that does not exist has no policy: NOT_FOUND (tests/inprocess/test_schemas.py sets some).
    with pytest.raises(exceptions.NotFound):
        sub.get_iam_policy(request={"resource": "projects/test-project/schemas/none"})


def test_listening_beyond_loopback_without_authentication_is_warned_about(
    start_gateway: GatewayFactory,
) -> None:
    gw = start_gateway("--host", "0.0.0.0")
    log = gw.log_paths[-1].read_text()
    assert "WARNING" in log and "AUTHENTICATION IS OFF" in log, log[-3000:]
    quiet = start_gateway()
    assert "AUTHENTICATION IS OFF" not in quiet.log_paths[-1].read_text()
