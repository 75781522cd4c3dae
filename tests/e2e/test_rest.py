"""The REST/JSON surface over plain HTTP (aiohttp's client) against a gateway subprocess."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
import yarl

from tests.e2e.clients import clients, pull_until
from tests.gateways import GatewayProcess

pytestmark = pytest.mark.integration
Json = Any


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class Rest:
    """A tiny REST client: `await api.call("GET", "/v1/...")` -> (status, JSON body)."""

    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    def url(self, path: str, query: str = "") -> yarl.URL:
        quoted = urllib.parse.quote(path, safe="/:~")
        return yarl.URL(f"{self.base}{quoted}" + (f"?{query}" if query else ""), encoded=True)

    async def raw(
        self,
        method: str,
        path: str,
        data: bytes | io.BytesIO | None = None,
        query: str = "",
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Json, aiohttp.ClientResponse]:
        async with self.session.request(method, self.url(path, query), data=data, headers=headers) as resp:
            text = await resp.read()
            return resp.status, json.loads(text) if text else None, resp

    async def call(self, method: str, path: str, body: Json = None, query: str = "") -> tuple[int, Json]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else None
        status, parsed, _ = await self.raw(method, path, data, query, headers)
        return status, parsed

    async def ok(self, method: str, path: str, body: Json = None, query: str = "") -> Json:
        """Expect 200; retry 503 (UNAVAILABLE) a few times, as the official clients do."""
        for delay in (0.2, 0.5, 1.0, 2.0, 0.0):
            status, parsed = await self.call(method, path, body, query)
            if status != 503 or not delay:
                break
            await asyncio.sleep(delay)
        assert status == 200, (method, path, status, parsed)
        return parsed

    async def pull(self, sub: str, count: int, within: float = 30.0) -> list[Json]:
        got: list[Json] = []
        deadline = time.monotonic() + within
        while len(got) < count and time.monotonic() < deadline:
            resp = await self.ok("POST", f"/v1/{sub}:pull", {"maxMessages": 100})
            got.extend(resp.get("receivedMessages", []))
        return got


@contextlib.asynccontextmanager
async def rest_api(gw: GatewayProcess) -> AsyncIterator[Rest]:
    async with aiohttp.ClientSession() as session:
        yield Rest(session, f"http://{gw.rest_address}")


def assert_error(status: int, body: Json, http: int, code: str, text: str = "") -> None:
    assert status == http, body
    assert set(body) == {"error"}, body
    err = body["error"]
    assert err["code"] == http and err["status"] == code, err
    assert isinstance(err["message"], str) and err["message"], err
    assert text in err["message"], err


# -- the whole flow -----------------------------------------------------------------------------


async def test_full_flow_over_http(shared_gateway: GatewayProcess, names: Callable[[str], str]) -> None:
    topic, sub = names("topics"), names("subscriptions")
    async with rest_api(shared_gateway) as api:
        created = await api.ok("PUT", f"/v1/{topic}", {"labels": {"team": "a"}})
        assert created == {"name": topic, "labels": {"team": "a"}, "state": "ACTIVE"}
        assert await api.ok("GET", f"/v1/{topic}") == created
        patched = await api.ok(
            "PATCH", f"/v1/{topic}", {"topic": {"labels": {"team": "b"}}, "updateMask": "labels"}
        )
        assert patched["labels"] == {"team": "b"}

        made = await api.ok("PUT", f"/v1/{sub}", {"topic": topic, "ackDeadlineSeconds": 30})
        assert made["topic"] == topic and made["ackDeadlineSeconds"] == 30
        assert made["messageRetentionDuration"] == "604800s"
        assert await api.ok("GET", f"/v1/{sub}") == made
        listed = await api.ok("GET", f"/v1/{topic}/subscriptions")
        assert listed == {"subscriptions": [sub]}

        published = await api.ok(
            "POST",
            f"/v1/{topic}:publish",
            {
                "messages": [
                    {"data": b64(b"one"), "attributes": {"k": "v"}},
                    {"data": b64(b"two"), "orderingKey": "key-1"},
                    {"attributes": {"only": "attrs"}},
                ]
            },
        )
        ids = published["messageIds"]
        assert len(ids) == 3 and all(isinstance(i, str) and i.isdigit() for i in ids)

        got = await api.pull(sub, 3)
        by_id = {m["message"]["messageId"]: m for m in got}
        assert set(by_id) == set(ids)
        first = by_id[ids[0]]["message"]
        assert base64.b64decode(first["data"]) == b"one" and first["attributes"] == {"k": "v"}
        assert first["publishTime"].endswith("Z") and "T" in first["publishTime"]
        assert by_id[ids[1]]["message"]["orderingKey"] == "key-1"
        assert "data" not in by_id[ids[2]]["message"]

        # nack the first message: it comes back; ack everything: nothing is left
        nack_id = by_id[ids[0]]["ackId"]
        await api.ok("POST", f"/v1/{sub}:modifyAckDeadline", {"ackIds": [nack_id], "ackDeadlineSeconds": 0})
        await api.ok(
            "POST",
            f"/v1/{sub}:modifyAckDeadline",
            {"ackIds": [by_id[ids[1]]["ackId"]], "ackDeadlineSeconds": 60},
        )
        again = await api.pull(sub, 1)
        assert [m["message"]["messageId"] for m in again] == [ids[0]]
        assert (
            await api.ok("POST", f"/v1/{sub}:acknowledge", {"ackIds": [m["ackId"] for m in (*got, *again)]})
            == {}
        )
        assert await api.ok("POST", f"/v1/{sub}:pull", {"maxMessages": 10, "returnImmediately": True}) == {}

        patched_sub = await api.ok(
            "PATCH",
            f"/v1/{sub}",
            {
                "subscription": {"ackDeadlineSeconds": 42, "labels": {"x": "y"}},
                "updateMask": "ackDeadlineSeconds,labels",
            },
        )
        assert patched_sub["ackDeadlineSeconds"] == 42 and patched_sub["labels"] == {"x": "y"}

        assert await api.ok("POST", f"/v1/{sub}:detach") == {}
        assert (await api.ok("GET", f"/v1/{sub}"))["detached"] is True
        status, body = await api.call("POST", f"/v1/{sub}:pull", {"maxMessages": 1})
        assert_error(status, body, 400, "FAILED_PRECONDITION", "detached")

        assert await api.ok("DELETE", f"/v1/{sub}") == {}
        assert await api.ok("DELETE", f"/v1/{topic}") == {}
        status, body = await api.call("GET", f"/v1/{topic}")
        assert_error(status, body, 404, "NOT_FOUND", topic)


async def test_list_pages_with_tokens(shared_gateway: GatewayProcess, names: Callable[[str], str]) -> None:
    project = f"projects/rest-pages-{names('topics')[-10:]}"
    topics = [f"{project}/topics/t-{i}" for i in range(5)]
    async with rest_api(shared_gateway) as api:
        for t in topics:
            await api.ok("PUT", f"/v1/{t}")
        seen: list[str] = []
        token = ""
        for _ in range(10):
            query = "pageSize=2" + (f"&pageToken={urllib.parse.quote(token)}" if token else "")
            page = await api.ok("GET", f"/v1/{project}/topics", query=query)
            assert len(page["topics"]) <= 2
            seen += [t["name"] for t in page["topics"]]
            token = page.get("nextPageToken", "")
            if not token:
                break
        assert seen == topics
        # original (proto) field names work in the query too
        page = await api.ok("GET", f"/v1/{project}/topics", query="page_size=4")
        assert len(page["topics"]) == 4 and page["nextPageToken"]
        status, body = await api.call("GET", f"/v1/{project}/topics", query="pageToken=a")
        assert_error(status, body, 400, "INVALID_ARGUMENT", "page_token")
        for t in topics:
            await api.ok("DELETE", f"/v1/{t}")


async def test_names_with_reserved_characters(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    topic = names("topics", "-a%b+c~d")
    async with rest_api(shared_gateway) as api:
        assert (await api.ok("PUT", f"/v1/{topic}"))["name"] == topic
        assert (await api.ok("GET", f"/v1/{topic}"))["name"] == topic
        await api.ok("DELETE", f"/v1/{topic}")


# -- JSON mapping ---------------------------------------------------------------------------------


async def test_json_round_trip_of_topic_and_subscription(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    topic, dead, sub = names("topics"), names("topics", "-dead"), names("subscriptions")
    topic_json = {
        "labels": {"a": "1"},
        "messageStoragePolicy": {"allowedPersistenceRegions": ["europe-west1"], "enforceInTransit": True},
        "kmsKeyName": "projects/p/locations/l/keyRings/r/cryptoKeys/k",
        "messageRetentionDuration": "86400s",
    }
    sub_json = {
        "topic": topic,
        "pushConfig": {
            "pushEndpoint": "https://example.com/push",
            "attributes": {"x-goog-version": "v1"},
            "oidcToken": {"serviceAccountEmail": "sa@example.com", "audience": "aud"},
        },
        "ackDeadlineSeconds": 20,
        "retainAckedMessages": True,
        "messageRetentionDuration": "3600.500s",
        "labels": {"b": "2"},
        "enableMessageOrdering": True,
        "expirationPolicy": {"ttl": "172800s"},
        "filter": 'attributes.k = "v"',
        "deadLetterPolicy": {"deadLetterTopic": dead, "maxDeliveryAttempts": 7},
        "retryPolicy": {"minimumBackoff": "1s", "maximumBackoff": "30.250s"},
    }
    async with rest_api(shared_gateway) as api:
        got_topic = await api.ok("PUT", f"/v1/{topic}", topic_json)
        assert got_topic == {"name": topic, **topic_json, "state": "ACTIVE"}
        await api.ok("PUT", f"/v1/{dead}")
        got_sub = await api.ok("PUT", f"/v1/{sub}", sub_json)
        assert {k: got_sub[k] for k in sub_json} == sub_json
        assert got_sub["state"] == "ACTIVE" and got_sub["topicMessageRetentionDuration"] == "86400s"
        assert await api.ok("GET", f"/v1/{sub}") == got_sub

        as_ints = await api.ok("GET", f"/v1/{sub}", query="$alt=json;enum-encoding=int")
        assert as_ints["state"] == 1 and as_ints["ackDeadlineSeconds"] == 20
        assert (await api.ok("GET", f"/v1/{sub}", query="alt=json"))["state"] == "ACTIVE"
        _, _, resp = await api.raw("GET", f"/v1/{sub}", query="prettyPrint=true")
        assert resp.content_type == "application/json"

        # proto field names are accepted on input; enums by number too
        other = names("subscriptions", "-snake")
        made = await api.ok(
            "PUT",
            f"/v1/{other}",
            {"topic": topic, "ack_deadline_seconds": 15, "push_config": {"push_endpoint": "http://h/p"}},
        )
        assert made["ackDeadlineSeconds"] == 15 and made["pushConfig"]["pushEndpoint"] == "http://h/p"
        pushed = await api.ok("POST", f"/v1/{other}:modifyPushConfig", {"pushConfig": {}})
        assert pushed == {}
        assert (await api.ok("GET", f"/v1/{other}")).get("pushConfig", {}) == {}

        listed = await api.ok(
            "GET", f"/v1/{topic.rsplit('/topics/', 1)[0]}/subscriptions", query="pageSize=1000"
        )
        assert got_sub in listed["subscriptions"]
        assert await api.ok("GET", f"/v1/{topic}/snapshots") == {}  # none yet
        for name in (sub, other, topic, dead):
            await api.ok("DELETE", f"/v1/{name}")


async def test_unicode_and_binary_data_round_trip(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    topic, sub = names("topics"), names("subscriptions")
    payload = bytes(range(256))
    async with rest_api(shared_gateway) as api:
        await api.ok("PUT", f"/v1/{topic}")
        await api.ok("PUT", f"/v1/{sub}", {"topic": topic})
        urlsafe = base64.urlsafe_b64encode(payload).decode().rstrip("=")  # both alphabets, no padding
        await api.ok(
            "POST",
            f"/v1/{topic}:publish",
            {
                "messages": [
                    {"data": urlsafe, "attributes": {"ключ": "värde ✓"}, "ordering_key": "ok"},
                ]
            },
        )
        [got] = await api.pull(sub, 1)
        assert base64.b64decode(got["message"]["data"]) == payload
        assert got["message"]["attributes"] == {"ключ": "värde ✓"}
        assert got["message"]["orderingKey"] == "ok"
        await api.ok("POST", f"/v1/{sub}:acknowledge", {"ackIds": [got["ackId"]]})
        await api.ok("DELETE", f"/v1/{sub}")
        await api.ok("DELETE", f"/v1/{topic}")


async def test_snapshots_and_seek(shared_gateway: GatewayProcess, names: Callable[[str], str]) -> None:
    topic, sub, snap = names("topics"), names("subscriptions"), names("snapshots")
    async with rest_api(shared_gateway) as api:
        await api.ok("PUT", f"/v1/{topic}")
        await api.ok("PUT", f"/v1/{sub}", {"topic": topic})
        start = time.time() - 1
        await api.ok("POST", f"/v1/{topic}:publish", {"messages": [{"data": b64(b"m0")}]})
        [m0] = await api.pull(sub, 1)
        snapshot = await api.ok("PUT", f"/v1/{snap}", {"subscription": sub, "labels": {"k": "v"}})
        assert snapshot["name"] == snap and snapshot["topic"] == topic and snapshot["labels"] == {"k": "v"}
        assert snapshot["expireTime"].endswith("Z")
        assert await api.ok("GET", f"/v1/{snap}") == snapshot
        assert snap in (await api.ok("GET", f"/v1/{topic}/snapshots"))["snapshots"]
        listed = await api.ok(
            "GET", f"/v1/{snap.rsplit('/snapshots/', 1)[0]}/snapshots", query="pageSize=1000"
        )
        assert snapshot in listed["snapshots"]
        patched = await api.ok(
            "PATCH", f"/v1/{snap}", {"snapshot": {"labels": {"k": "w"}}, "updateMask": "labels"}
        )
        assert patched["labels"] == {"k": "w"}

        await api.ok("POST", f"/v1/{sub}:acknowledge", {"ackIds": [m0["ackId"]]})
        assert await api.ok("POST", f"/v1/{sub}:seek", {"snapshot": snap}) == {}
        [again] = await api.pull(sub, 1)  # unacked when the snapshot was taken: delivered again
        assert base64.b64decode(again["message"]["data"]) == b"m0"
        await api.ok("POST", f"/v1/{sub}:acknowledge", {"ackIds": [again["ackId"]]})
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(start)) + ".000Z"
        assert await api.ok("POST", f"/v1/{sub}:seek", {"time": stamp}) == {}
        [third] = await api.pull(sub, 1)
        assert base64.b64decode(third["message"]["data"]) == b"m0"
        await api.ok("POST", f"/v1/{sub}:acknowledge", {"ackIds": [third["ackId"]]})

        assert await api.ok("DELETE", f"/v1/{snap}") == {}
        status, body = await api.call("GET", f"/v1/{snap}")
        assert_error(status, body, 404, "NOT_FOUND")
        await api.ok("DELETE", f"/v1/{sub}")
        await api.ok("DELETE", f"/v1/{topic}")


# -- errors ---------------------------------------------------------------------------------------


async def test_error_envelope_for_each_status(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    topic, sub = names("topics"), names("subscriptions")
    async with rest_api(shared_gateway) as api:
        await api.ok("PUT", f"/v1/{topic}")
        status, body = await api.call("PUT", f"/v1/{topic}")
        assert_error(status, body, 409, "ALREADY_EXISTS", topic)
        status, body = await api.call("GET", "/v1/projects/p/topics/x")
        assert_error(status, body, 400, "INVALID_ARGUMENT", "Invalid resource name")
        status, body = await api.call(
            "POST", f"/v1/{names('topics', '-gone')}:publish", {"messages": [{"data": "eA=="}]}
        )
        assert_error(status, body, 404, "NOT_FOUND")
        status, body = await api.call("PUT", f"/v1/{sub}", {"topic": names("topics", "-gone")})
        assert_error(status, body, 404, "NOT_FOUND")
        status, body = await api.call("POST", f"/v1/{topic}:publish", {"messages": [{}]})
        assert_error(status, body, 400, "INVALID_ARGUMENT")
        status, body = await api.call("PATCH", f"/v1/{topic}", {"topic": {}, "updateMask": "name"})
        assert_error(status, body, 400, "INVALID_ARGUMENT", "name")
        await api.ok("PUT", f"/v1/{sub}", {"topic": topic})
        status, body = await api.call("POST", f"/v1/{sub}:acknowledge", {"ackIds": ["not-an-ack-id"]})
        assert_error(status, body, 400, "INVALID_ARGUMENT", "ack")
        status, body = await api.call("POST", f"/v1/{sub}:pull", {"maxMessages": 0})
        assert_error(status, body, 400, "INVALID_ARGUMENT")
        await api.ok("POST", f"/v1/{sub}:detach")
        status, body = await api.call("POST", f"/v1/{sub}:pull", {"maxMessages": 1})
        assert_error(status, body, 400, "FAILED_PRECONDITION")
        status, body = await api.call("GET", f"/v1/{names('snapshots')}")
        assert_error(status, body, 404, "NOT_FOUND")
        status, body = await api.call(
            "POST", f"/v1/{sub}:seek", {"time": "2024-01-01T00:00:00Z", "snapshot": names("snapshots")}
        )
        assert_error(status, body, 400, "INVALID_ARGUMENT", "target")
        await api.ok("DELETE", f"/v1/{sub}")
        await api.ok("DELETE", f"/v1/{topic}")


BAD_BODIES: list[tuple[str, bytes, str]] = [
    ("malformed JSON", b'{"messages": [', "Malformed JSON"),
    ("not UTF-8", b'{"messages": "\xff"}', "UTF-8"),
    ("a JSON array", b"[]", "Expected a JSON object"),
    ("a JSON string", b'"x"', "Expected a JSON object"),
    ("NaN", b'{"messages": NaN}', "NaN"),
    ("unknown field", b'{"messages": [], "bogus": 1}', "bogus"),
    ("unknown nested field", b'{"messages": [{"data": "eA==", "colour": "red"}]}', "colour"),
    ("messages not a list", b'{"messages": {"data": "eA=="}}', "array"),
    ("message not an object", b'{"messages": ["eA=="]}', "object"),
    ("data not a string", b'{"messages": [{"data": 5}]}', "base64"),
    ("invalid base64 characters", b'{"messages": [{"data": "a!b?"}]}', "base64"),
    ("invalid base64 length", b'{"messages": [{"data": "abcde"}]}', "base64"),
    (
        "attribute value not a string",
        b'{"messages": [{"data": "eA==", "attributes": {"k": 1}}]}',
        "attributes",
    ),
    ("attributes not a map", b'{"messages": [{"data": "eA==", "attributes": ["k"]}]}', "attributes"),
    ("topic not a string", b'{"topic": 5, "messages": []}', "topic"),
    ("deeply nested", b'{"messages": [' + b"[" * 5000 + b"]" * 5000 + b"]}", ""),
]


@pytest.mark.parametrize(("why", "body", "text"), BAD_BODIES, ids=[b[0] for b in BAD_BODIES])
async def test_bad_publish_bodies_are_refused_without_a_write(
    shared_gateway: GatewayProcess, names: Callable[[str], str], why: str, body: bytes, text: str
) -> None:
    topic, sub = names("topics"), names("subscriptions")
    async with rest_api(shared_gateway) as api:
        await api.ok("PUT", f"/v1/{topic}", {"labels": {"kafka-partitions": "1"}})  # one partition: in order
        await api.ok("PUT", f"/v1/{sub}", {"topic": topic})
        good = b'{"data": "eA=="}'
        # a good message first: nothing of a refused request may be written
        head, sep, tail = body.partition(b'"messages": [')
        mixed = head + sep + good + (b"" if tail.startswith(b"]") else b", ") + tail if sep else body
        for attempt in {body, mixed}:
            status, parsed, _ = await api.raw(
                "POST", f"/v1/{topic}:publish", attempt, headers={"Content-Type": "application/json"}
            )
            assert_error(status, parsed, 400, "INVALID_ARGUMENT", text)
            assert parsed["error"]["message"].startswith("Invalid JSON payload received."), parsed
        await api.ok("POST", f"/v1/{topic}:publish", {"messages": [{"data": b64(b"after")}]})
        [first] = await api.pull(sub, 1)
        assert base64.b64decode(first["message"]["data"]) == b"after"
        await api.ok("DELETE", f"/v1/{sub}")
        await api.ok("DELETE", f"/v1/{topic}")


async def test_wrong_field_types(shared_gateway: GatewayProcess, names: Callable[[str], str]) -> None:
    sub = names("subscriptions")
    async with rest_api(shared_gateway) as api:
        for bad, text in [
            ({"topic": "projects/p/topics/ttt", "ackDeadlineSeconds": "ten"}, "ackDeadlineSeconds"),
            ({"topic": "projects/p/topics/ttt", "ackDeadlineSeconds": 1.5}, "ackDeadlineSeconds"),
            ({"topic": "projects/p/topics/ttt", "retainAckedMessages": "yes"}, "retainAckedMessages"),
            ({"topic": "projects/p/topics/ttt", "messageRetentionDuration": 600}, "messageRetentionDuration"),
            ({"topic": "projects/p/topics/ttt", "messageRetentionDuration": "ten minutes"}, "Duration"),
            ({"topic": "projects/p/topics/ttt", "state": True}, "state"),
            ({"topic": "projects/p/topics/ttt", "state": 1.5}, "state"),
            ({"topic": "projects/p/topics/ttt", "state": "NOT_A_STATE"}, "NOT_A_STATE"),
            ({"topic": "projects/p/topics/ttt", "pushConfig": []}, "pushConfig"),
            ({"topic": "projects/p/topics/ttt", "pushConfig": "x"}, "pushConfig"),
            ({"topic": "projects/p/topics/ttt", "labels": ["a"]}, "labels"),
        ]:
            status, body = await api.call("PUT", f"/v1/{sub}", bad)
            assert_error(status, body, 400, "INVALID_ARGUMENT", text)
        status, body = await api.call("PATCH", f"/v1/{sub}", {"subscription": {}, "updateMask": ["labels"]})
        assert_error(status, body, 400, "INVALID_ARGUMENT", "updateMask")
        status, body = await api.call("GET", f"/v1/{sub}")
        assert_error(status, body, 404, "NOT_FOUND")


async def test_bad_requests_outside_the_body(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    topic = names("topics")
    async with rest_api(shared_gateway) as api:
        cases: list[tuple[str, str, str, bytes | None, int, str, str]] = [
            ("DELETE", f"/v1/{topic}:publish", "", None, 405, "UNIMPLEMENTED", "allowed: POST"),
            ("POST", f"/v1/{topic}", "", b"{}", 405, "UNIMPLEMENTED", "allowed: PUT, PATCH, GET, DELETE"),
            ("GET", "/v1/projects/p/nothing", "", None, 404, "NOT_FOUND", "matches no method"),
            ("GET", "/v2/projects/p/topics", "", None, 404, "NOT_FOUND", "matches no method"),
            ("POST", f"/v1/{topic}:explode", "", b"{}", 404, "NOT_FOUND", "matches no method"),
            ("GET", "/v1/projects/p/topics", "bogus=1", None, 400, "INVALID_ARGUMENT", "bogus"),
            ("GET", "/v1/projects/p/topics", "pageSize=many", None, 400, "INVALID_ARGUMENT", "page_size"),
            (
                "GET",
                "/v1/projects/p/topics",
                "pageSize=1&pageSize=2",
                None,
                400,
                "INVALID_ARGUMENT",
                "more than once",
            ),
            ("GET", "/v1/projects/p/topics", "project=projects/q", None, 400, "INVALID_ARGUMENT", "path"),
            ("GET", "/v1/projects/p/topics", "$alt=proto", None, 400, "INVALID_ARGUMENT", "alt"),
            (
                "GET",
                "/v1/projects/p/topics",
                "prettyPrint=maybe",
                None,
                400,
                "INVALID_ARGUMENT",
                "prettyPrint",
            ),
            ("POST", f"/v1/{topic}:publish", "messages=x", b"{}", 400, "INVALID_ARGUMENT", "messages"),
            ("GET", f"/v1/{topic}", "", b'{"topic": "x"}', 400, "INVALID_ARGUMENT", "no request body"),
        ]
        for method, path, query, data, http, code, text in cases:
            status, body, resp = await api.raw(method, path, data, query)
            assert_error(status, body, http, code, text)
            if http == 405:
                assert resp.headers["Allow"].startswith(text.split(": ")[1][:3])


async def test_body_over_10_mib_is_refused(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    topic = names("topics")
    async with rest_api(shared_gateway) as api:
        await api.ok("PUT", f"/v1/{topic}")
        big = json.dumps({"messages": [{"data": b64(b"x" * (8 * 1024 * 1024))}]}).encode()
        assert len(big) > 10 * 1024 * 1024
        status, body, _ = await api.raw("POST", f"/v1/{topic}:publish", io.BytesIO(big))
        assert_error(status, body, 400, "INVALID_ARGUMENT", "10485760 bytes")

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the limit still holds
            for i in range(0, len(big), 1 << 20):
                yield big[i : i + (1 << 20)]

        async with api.session.post(api.url(f"/v1/{topic}:publish"), data=chunks()) as resp:
            assert_error(resp.status, await resp.json(), 400, "INVALID_ARGUMENT", "10485760 bytes")
        await api.ok("DELETE", f"/v1/{topic}")


async def test_openapi_document_is_served(shared_gateway: GatewayProcess) -> None:
    async with rest_api(shared_gateway) as api:
        doc = await api.ok("GET", "/v1/openapi.json")
    assert doc["openapi"].startswith("3.")
    publish = doc["paths"]["/v1/projects/{projectsId}/topics/{topicsId}:publish"]["post"]
    assert publish["operationId"] == "google.pubsub.v1.Publisher.Publish"
    assert "/v1/projects/{projectsId}/subscriptions/{subscriptionsId}:pull" in doc["paths"]
    assert not any("streaming" in p.lower() for p in doc["paths"])
    message = doc["components"]["schemas"]["google.pubsub.v1.PubsubMessage"]["properties"]
    assert message["data"]["format"] == "byte" and message["publishTime"]["format"] == "date-time"
    assert "orderingKey" in message


# -- interop with the official gRPC client --------------------------------------------------------


async def test_rest_and_grpc_see_each_others_messages(
    shared_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    topic, sub = names("topics"), names("subscriptions")
    pub_client, sub_client = clients(shared_gateway)
    async with rest_api(shared_gateway) as api:
        await api.ok("PUT", f"/v1/{topic}")
        await asyncio.to_thread(sub_client.create_subscription, name=sub, topic=topic)
        assert (await api.ok("GET", f"/v1/{sub}"))["topic"] == topic

        # REST -> gRPC
        await api.ok(
            "POST",
            f"/v1/{topic}:publish",
            {"messages": [{"data": b64(b"from rest"), "attributes": {"via": "http"}, "orderingKey": "k"}]},
        )
        [received] = await asyncio.to_thread(pull_until, sub_client, sub, 1)
        assert received.message.data == b"from rest"
        assert dict(received.message.attributes) == {"via": "http"}
        assert received.message.ordering_key == "k"
        await asyncio.to_thread(sub_client.acknowledge, subscription=sub, ack_ids=[received.ack_id])

        # gRPC -> REST, acked over REST
        future = pub_client.publish(topic, b"from grpc", via="grpc")
        message_id = await asyncio.to_thread(future.result, 30)
        [got] = await api.pull(sub, 1)
        assert got["message"]["messageId"] == message_id
        assert base64.b64decode(got["message"]["data"]) == b"from grpc"
        assert got["message"]["attributes"] == {"via": "grpc"}
        await api.ok("POST", f"/v1/{sub}:acknowledge", {"ackIds": [got["ackId"]]})
        assert await api.ok("POST", f"/v1/{sub}:pull", {"maxMessages": 5, "returnImmediately": True}) == {}

        # a REST ack id works over gRPC and the other way round
        await api.ok("POST", f"/v1/{topic}:publish", {"messages": [{"data": b64(b"x")}]})
        [again] = await api.pull(sub, 1)
        await asyncio.to_thread(sub_client.acknowledge, subscription=sub, ack_ids=[again["ackId"]])
        await asyncio.to_thread(sub_client.delete_subscription, subscription=sub)
        await api.ok("DELETE", f"/v1/{topic}")
