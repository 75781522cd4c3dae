"""IAM on SchemaService with authentication on: each call needs its `pubsub.schemas.*`
permission, from the project's bindings or the schema's own policy, which a revision's name
(`.../schemas/S@R`) shares. Over REST, with bearer tokens from a token file."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

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


def test_schema_calls_need_their_permissions(secured: InProcessGateway) -> None:
    sid = f"s-{uuid.uuid4().hex[:6]}"
    name = f"{PROJECT}/schemas/{sid}"
    definition = {"type": "AVRO", "definition": AVRO}
    assert secured.http("POST", f"{PROJECT}/schemas?schemaId={sid}", definition, token="t-viewer")[0] == 403
    status, made = secured.http("POST", f"{PROJECT}/schemas?schemaId={sid}", definition, token="t-admin")
    assert status == 200, made
    revision = f"{name}@{made['revisionId']}"

    # The project's viewers read and validate; they may not change anything.
    assert secured.http("GET", revision, token="t-viewer")[0] == 200
    assert secured.http("GET", f"{PROJECT}/schemas", token="t-viewer")[0] == 200
    message = {"name": name, "message": "eyJhIjogMX0=", "encoding": "JSON"}
    assert secured.http("POST", f"{PROJECT}/schemas:validateMessage", message, token="t-viewer") == (200, {})
    assert secured.http("POST", f"{name}:commit", {"schema": definition}, token="t-viewer")[0] == 403
    assert secured.http("DELETE", name, token="t-viewer")[0] == 403

    # Someone with no role on the project gets a role on this schema alone, and its revisions.
    assert secured.http("GET", revision, token="t-none")[0] == 403
    policy = {"policy": {"bindings": [{"role": "roles/pubsub.viewer", "members": [TOKENS["t-none"]]}]}}
    assert secured.http("POST", f"{name}:setIamPolicy", policy, token="t-admin")[0] == 200
    assert secured.http("GET", revision, token="t-none")[0] == 200
    assert secured.http("GET", f"{name}:listRevisions", token="t-none")[0] == 200
    assert secured.http("GET", f"{PROJECT}/schemas", token="t-none")[0] == 403  # a project permission
    assert secured.http("DELETE", name, token="t-admin") == (200, {})
