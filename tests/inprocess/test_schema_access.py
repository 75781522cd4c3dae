"""IAM on SchemaService with authentication on: each call needs its `pubsub.schemas.*`
permission, from the project's bindings or the schema's own policy, which a revision's name
(`.../schemas/S@R`) shares. Over REST, with bearer tokens from a token file."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.inprocess.conftest import InProcessGateway, settings_for

PROJECT = "projects/schema-access"
AVRO = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})
TOKENS = {
    "t-admin": "user:admin@example.com",
    "t-viewer": "user:viewer@example.com",
    "t-none": "user:none@example.com",
}


@pytest.fixture(scope="module")
def secured(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessGateway]:
    folder: Path = tmp_path_factory.mktemp("schema-access")
    tokens, policies = folder / "tokens", folder / "iam.json"
    tokens.write_text("".join(f"{t} {m}\n" for t, m in TOKENS.items()))
    bindings = [
        {"role": "roles/pubsub.admin", "members": [TOKENS["t-admin"]]},
        {"role": "roles/pubsub.viewer", "members": [TOKENS["t-viewer"]]},
    ]
    policies.write_text(json.dumps({PROJECT: {"bindings": bindings}}))
    settings = settings_for(
        kafka_bootstrap,
        f"__inproc_{uuid.uuid4().hex[:8]}",
        auth_token_file=tokens,
        iam_policy_file=policies,
    )
    gateway = InProcessGateway(settings).start()
    yield gateway
    gateway.stop()


def _http(
    gw: InProcessGateway, token: str, method: str, path: str, body: object | None = None
) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"http://{gw.rest_address}/v1/{path}",
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"content-type": "application/json", "authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def test_schema_calls_need_their_permissions(secured: InProcessGateway) -> None:
    sid = f"s-{uuid.uuid4().hex[:6]}"
    name = f"{PROJECT}/schemas/{sid}"
    definition = {"type": "AVRO", "definition": AVRO}
    assert _http(secured, "t-viewer", "POST", f"{PROJECT}/schemas?schemaId={sid}", definition)[0] == 403
    status, made = _http(secured, "t-admin", "POST", f"{PROJECT}/schemas?schemaId={sid}", definition)
    assert status == 200, made
    revision = f"{name}@{made['revisionId']}"

    # The project's viewers read and validate; they may not change anything.
    assert _http(secured, "t-viewer", "GET", revision)[0] == 200
    assert _http(secured, "t-viewer", "GET", f"{PROJECT}/schemas")[0] == 200
    message = {"name": name, "message": "eyJhIjogMX0=", "encoding": "JSON"}
    assert _http(secured, "t-viewer", "POST", f"{PROJECT}/schemas:validateMessage", message) == (200, {})
    assert _http(secured, "t-viewer", "POST", f"{name}:commit", {"schema": definition})[0] == 403
    assert _http(secured, "t-viewer", "DELETE", name)[0] == 403

    # Someone with no role on the project gets a role on this schema alone, and its revisions.
    assert _http(secured, "t-none", "GET", revision)[0] == 403
    policy = {"policy": {"bindings": [{"role": "roles/pubsub.viewer", "members": [TOKENS["t-none"]]}]}}
    assert _http(secured, "t-admin", "POST", f"{name}:setIamPolicy", policy)[0] == 200
    assert _http(secured, "t-none", "GET", revision)[0] == 200
    assert _http(secured, "t-none", "GET", f"{name}:listRevisions")[0] == 200
    assert _http(secured, "t-none", "GET", f"{PROJECT}/schemas")[0] == 403  # a project permission
    assert _http(secured, "t-admin", "DELETE", name) == (200, {})
