"""docs/fields.md lists every field of Topic, Subscription and PushConfig (and its sub-messages)
with what the gateway does with it. Read against the generated descriptors, so that a field
added to the protos fails here until the table says what happens to it."""

from __future__ import annotations

import pathlib

from google.protobuf.descriptor import Descriptor

from gateway._pb.google.pubsub.v1 import pubsub_pb2
from gateway.translate import unsupported

TABLE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "fields.md"
MESSAGES: dict[str, Descriptor] = {
    "Topic": pubsub_pb2.Topic.DESCRIPTOR,
    "Subscription": pubsub_pb2.Subscription.DESCRIPTOR,
    "PushConfig": pubsub_pb2.PushConfig.DESCRIPTOR,
    "PushConfig.OidcToken": pubsub_pb2.PushConfig.OidcToken.DESCRIPTOR,
    "PushConfig.PubsubWrapper": pubsub_pb2.PushConfig.PubsubWrapper.DESCRIPTOR,
    "PushConfig.NoWrapper": pubsub_pb2.PushConfig.NoWrapper.DESCRIPTOR,
}
STATUSES = ("implemented", "no effect", "refused (UNIMPLEMENTED)", "output only", "input only")


def rows() -> dict[tuple[str, str], str]:
    """(message, field) -> status, from the table rows of docs/fields.md."""
    out: dict[tuple[str, str], str] = {}
    for line in TABLE.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or cells[0] not in MESSAGES:
            continue
        field = cells[1].strip("`")
        assert (cells[0], field) not in out, f"{cells[0]}.{field} is listed twice"
        out[(cells[0], field)] = cells[2]
    return out


def test_every_field_is_in_the_table_and_nothing_else() -> None:
    listed = rows()
    fields = {(message, f.name) for message, desc in MESSAGES.items() for f in desc.fields}
    assert sorted(fields - listed.keys()) == [], "fields missing from docs/fields.md"
    assert sorted(listed.keys() - fields) == [], "docs/fields.md lists fields the protos lack"


def test_every_status_is_one_of_the_table_of_statuses() -> None:
    assert {s for s in rows().values() if s not in STATUSES} == set()


def test_refused_fields_are_what_the_code_refuses() -> None:
    listed = rows()
    for message, refused in (
        ("Topic", unsupported.TOPIC_REFUSED),
        ("Subscription", unsupported.SUBSCRIPTION_REFUSED),
    ):
        in_table = {f for (m, f), status in listed.items() if m == message and status.startswith("refused")}
        assert in_table == set(refused), message


def test_scrubbed_fields_are_output_or_input_only() -> None:
    listed = rows()
    for message, scrubbed in (
        ("Topic", unsupported.TOPIC_SCRUBBED),
        ("Subscription", unsupported.SUBSCRIPTION_SCRUBBED),
    ):
        for field in scrubbed:
            assert listed[(message, field)] in ("output only", "input only"), (message, field)


def test_schema_settings_are_implemented() -> None:
    assert rows()[("Topic", "schema_settings")] == "implemented"
