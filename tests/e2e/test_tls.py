"""TLS on both wires, in both layouts (one shared port, and `--rest-port 0`): the official
client over gRPC with the test's own CA, REST over HTTPS, plaintext refused on every port, a
certificate rotated without a restart (a broken rewrite first, which changes nothing), client
certificates required, and the peer hop that forwards acks between two processes over mutual
TLS."""

from __future__ import annotations

import json
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from google.api_core import exceptions

from gateway.kafka.tls import Issued, LocalCa
from tests.conftest import GatewayFactory
from tests.e2e.clients import await_subscription, exactly_once_backlog, pull_nothing, pull_until
from tests.e2e.pki import HOSTS, Pki
from tests.gateways import GatewayProcess

pytestmark = pytest.mark.integration
LAYOUTS = ["shared", "0"]  # --rest-port: one port for both, or REST on a port of its own


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


def _start(
    start_gateway: GatewayFactory,
    pki: Pki,
    layout: str,
    *,
    client_auth: str = "none",
    prefix: str | None = None,
) -> GatewayProcess:
    gw: GatewayProcess = start_gateway("--rest-port", layout, *pki.flags(client_auth), prefix=prefix)
    assert (gw.address == gw.rest_address) is (layout == "shared")
    return gw


def _https(
    pki: Pki, address: str, method: str, path: str, certificate: Issued | None = None
) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(f"https://{address}{path}", method=method)
    context = pki.context(certificate=certificate)
    try:
        with urllib.request.urlopen(request, timeout=15, context=context) as resp:
            return int(resp.status), json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def _address(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


def _served_serial(pki: Pki, address: str, alpn: str, certificate: Issued | None = None) -> int:
    """The serial of the certificate a new connection is shown, offering `alpn` (on a shared
    port: h2 reaches the gRPC server's TLS, http/1.1 REST's)."""
    with (
        socket.create_connection(_address(address), timeout=10) as raw,
        pki.context(alpn, certificate).wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
        assert der is not None
        assert tls.selected_alpn_protocol() == alpn
        return x509.load_der_x509_certificate(der).serial_number


def _answer_to_plaintext(address: str, first: bytes) -> bytes:
    """What a TLS port sends back to a plaintext client: nothing (closed or reset), never an
    answer in the clear."""
    with socket.create_connection(_address(address), timeout=10) as sock:
        sock.sendall(first)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
        return received


def _get_topic_code(channel: grpc.Channel, topic: str) -> grpc.StatusCode:
    from google.pubsub_v1 import types

    call = channel.unary_unary(
        "/google.pubsub.v1.Publisher/GetTopic",
        request_serializer=types.GetTopicRequest.serialize,
        response_deserializer=types.Topic.deserialize,
    )
    try:
        call(types.GetTopicRequest(topic=topic), timeout=10)
    except grpc.RpcError as err:
        return err.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_official_client_and_rest_over_tls_and_no_plaintext(
    start_gateway: GatewayFactory, pki: Pki, names: Callable[[str], str], layout: str
) -> None:
    gw = _start(start_gateway, pki, layout)
    topic, subscription = names("topics"), names("subscriptions")
    pub, sub = pki.clients(gw)
    pub.create_topic(name=topic)
    sub.create_subscription(name=subscription, topic=topic)
    ids = [pub.publish(topic, f"m{i}".encode()).result(timeout=30) for i in range(3)]
    got = pull_until(sub, subscription, 3)
    assert sorted(m.message.data for m in got) == [b"m0", b"m1", b"m2"] and len(set(ids)) == 3
    sub.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in got])

    other = names("topics", "-rest")
    assert _https(pki, gw.rest_address, "PUT", f"/v1/{other}")[0] == 200
    status, body = _https(pki, gw.rest_address, "GET", f"/v1/{other}")
    assert (status, body["name"]) == (200, other)
    assert _https(pki, gw.rest_address, "GET", f"/v1/{subscription}")[1]["topic"] == topic

    with grpc.insecure_channel(gw.address, options=[("grpc.use_local_subchannel_pool", 1)]) as plain:
        assert _get_topic_code(plain, topic) == grpc.StatusCode.UNAVAILABLE
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    request = f"GET /v1/{other} HTTP/1.1\r\nHost: gateway\r\n\r\n".encode()
    for address in {gw.address, gw.rest_address}:
        for first in (request, preface):
            answer = _answer_to_plaintext(address, first)
            assert b"HTTP" not in answer and other.encode() not in answer, answer
    assert pull_nothing(sub, subscription, 1.0) == []  # TLS clients are still served


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_rotated_certificate_is_served_without_a_restart(
    start_gateway: GatewayFactory, pki: Pki, names: Callable[[str], str], layout: str
) -> None:
    gw = _start(start_gateway, pki, layout)
    first = pki.server.serial
    assert _served_serial(pki, gw.address, "h2") == first
    assert _served_serial(pki, gw.rest_address, "http/1.1") == first
    pub, sub = pki.clients(gw)  # a connection made before the rotation
    topic = names("topics")
    pub.create_topic(name=topic)

    pki.key_file.write_bytes(b"-----BEGIN PRIVATE KEY-----\nhalf written")
    for _ in range(3):  # a broken rewrite changes nothing
        assert _served_serial(pki, gw.address, "h2") == first
        assert _served_serial(pki, gw.rest_address, "http/1.1") == first
    log = gw.log_paths[-1].read_text()
    assert log.count("still serving") == 1, "one warning for one state of the files"

    second = pki.install(pki.ca.issue("gateway", HOSTS)).serial
    assert second != first
    assert _served_serial(pki, gw.address, "h2") == second
    assert _served_serial(pki, gw.rest_address, "http/1.1") == second
    assert "TLS: reloaded" in gw.log_paths[-1].read_text()

    pub.publish(topic, b"old connection").result(timeout=30)  # open connections carry on
    new_pub, _ = pki.clients(gw)  # and new ones, on the new certificate, are served
    new_pub.publish(topic, b"new connection").result(timeout=30)
    assert _https(pki, gw.rest_address, "GET", f"/v1/{topic}")[0] == 200
    assert gw.proc is not None and gw.proc.poll() is None
    del sub


@pytest.mark.parametrize("layout", LAYOUTS)
def test_client_certificates_required(
    start_gateway: GatewayFactory, pki: Pki, names: Callable[[str], str], layout: str
) -> None:
    gw = _start(start_gateway, pki, layout, client_auth="require")
    member, stranger = pki.client(), LocalCa("another CA").issue("a stranger", server=False)
    topic = names("topics")

    pub, _ = pki.clients(gw, member)
    pub.create_topic(name=topic)
    pub.publish(topic, b"with a certificate").result(timeout=30)
    assert _https(pki, gw.rest_address, "GET", f"/v1/{topic}", member)[0] == 200

    for certificate in (None, stranger):
        with pki.channel(gw.address, certificate) as channel:
            assert _get_topic_code(channel, topic) == grpc.StatusCode.UNAVAILABLE
        with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
            _https(pki, gw.rest_address, "GET", f"/v1/{topic}", certificate)
    with pki.channel(gw.address, member) as channel:  # still served
        assert _get_topic_code(channel, topic) == grpc.StatusCode.OK


def test_client_certificates_optional(
    start_gateway: GatewayFactory, pki: Pki, names: Callable[[str], str]
) -> None:
    """REST asks for a certificate and verifies one that is shown; gRPC does not ask (grpcio
    cannot ask without requiring), so gRPC clients are served with or without one."""
    gw = _start(start_gateway, pki, "shared", client_auth="optional")
    member, stranger = pki.client(), LocalCa("another CA").issue("a stranger", server=False)
    topic = names("topics")
    assert _https(pki, gw.rest_address, "PUT", f"/v1/{topic}")[0] == 200
    assert _https(pki, gw.rest_address, "GET", f"/v1/{topic}", member)[0] == 200
    with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
        _https(pki, gw.rest_address, "GET", f"/v1/{topic}", stranger)  # shown, so verified
    for certificate in (None, member):
        with pki.channel(gw.address, certificate) as channel:
            assert _get_topic_code(channel, topic) == grpc.StatusCode.OK


def test_the_peer_hop_forwards_acks_over_mutual_tls(
    start_gateway: GatewayFactory, pki: Pki, names: Callable[[str], str]
) -> None:
    """Two processes of one subscription, clients required to show certificates: an ack sent to
    the process that does not own the message's partition is forwarded to the one that does,
    which accepts the forwarding process's own certificate, and takes effect."""
    a = _start(start_gateway, pki, "shared", client_auth="require")
    b = _start(start_gateway, pki, "shared", prefix=a.prefix, client_auth="require")
    member = pki.client()
    pub, sub_a = pki.clients(a, member)
    _, sub_b = pki.clients(b, member)
    _, subscription = exactly_once_backlog(pub, sub_a, names, 20)
    got = pull_until(sub_a, subscription, 20)  # a owns every partition: b never pulled
    assert len(got) == 20
    await_subscription(sub_b, subscription)
    acked, kept = got[:10], got[10:]
    # Exactly-once: the call fails unless the owner confirmed every id, so the hop worked.
    sub_b.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in acked])
    time.sleep(11)  # every lease has expired: what was not acked comes back, the rest never
    again = pull_until(sub_a, subscription, 10, timeout=20)
    assert sorted(m.message.data for m in again) == sorted(m.message.data for m in kept)
    sub_a.acknowledge(subscription=subscription, ack_ids=[m.ack_id for m in again])
    assert pull_nothing(sub_a, subscription, 2.0) == []


def test_client_certificates_authenticate_callers_for_iam(
    start_gateway: GatewayFactory, pki: Pki, names: Callable[[str], str], tmp_path: Path
) -> None:
    """--auth-mtls: a verified certificate names its caller (principal://x509/subject/ + its
    common name here; an email SAN would make it `user:EMAIL`), and IAM decides what that
    caller may do."""
    policy = tmp_path / "iam.json"
    policy.write_text(
        json.dumps(
            {
                "projects/test-project": {
                    "bindings": [
                        {"role": "roles/pubsub.admin", "members": ["principal://x509/subject/admin-client"]},
                        {
                            "role": "roles/pubsub.viewer",
                            "members": ["principal://x509/subject/viewer-client"],
                        },
                    ]
                }
            }
        )
    )
    gw = start_gateway(*pki.flags("require"), "--auth-mtls", "true", "--iam-policy-file", str(policy))
    admin, viewer = (
        pki.client_ca.issue("admin-client", server=False),
        pki.client_ca.issue("viewer-client", server=False),
    )
    topic = names("topics")

    admin_pub, _ = pki.clients(gw, admin)
    admin_pub.create_topic(name=topic)
    viewer_pub, _ = pki.clients(gw, viewer)
    assert viewer_pub.get_topic(topic=topic).name == topic
    with pytest.raises(exceptions.PermissionDenied, match=r"pubsub\.topics\.publish"):
        viewer_pub.publish(topic, b"m").result(timeout=30)
    assert admin_pub.publish(topic, b"m").result(timeout=30)

    assert _https(pki, gw.rest_address, "GET", f"/v1/{topic}", viewer)[0] == 200
    status, body = _https(pki, gw.rest_address, "DELETE", f"/v1/{topic}", viewer)
    assert status == 403 and "pubsub.topics.delete" in str(body), body
    assert _https(pki, gw.rest_address, "DELETE", f"/v1/{topic}", admin)[0] == 200
