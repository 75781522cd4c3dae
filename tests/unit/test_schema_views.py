"""The pure parts of core/schemas.py: how a stored revision is shown in each view."""

from __future__ import annotations

import pytest

from gateway._pb.google.pubsub.v1 import schema_pb2
from gateway.core import schemas
from gateway.core.resources import Resource
from gateway.errors import InvalidArgument
from gateway.schemas import RevisionId, SchemaName, SchemaType
from gateway.translate.meta import SchemaRevisionMeta

NAME = SchemaName("projects/p/schemas/s")


def _revision() -> Resource[schema_pb2.Schema, SchemaRevisionMeta]:
    return schemas._revision(NAME, "uid", RevisionId("0a0b0c0d"), 3, SchemaType.AVRO, '"int"')


def test_a_revision_is_named_by_its_schema_and_its_record_by_the_revision() -> None:
    rev = _revision()
    assert rev.name == "projects/p/schemas/s@0a0b0c0d"
    assert rev.proto.name == NAME and rev.proto.revision_id == "0a0b0c0d"
    assert rev.proto.type == schema_pb2.Schema.AVRO and rev.proto.HasField("revision_create_time")
    assert rev.meta == SchemaRevisionMeta("uid", 3)


@pytest.mark.parametrize(
    ("view", "default", "has_definition"),
    [
        (schema_pb2.SCHEMA_VIEW_UNSPECIFIED, schema_pb2.FULL, True),  # GetSchema
        (schema_pb2.SCHEMA_VIEW_UNSPECIFIED, schema_pb2.BASIC, False),  # the lists
        (schema_pb2.BASIC, schema_pb2.FULL, False),
        (schema_pb2.FULL, schema_pb2.BASIC, True),
    ],
)
def test_views(view: int, default: int, has_definition: bool) -> None:
    shown = schemas._view(_revision(), view, default)
    assert (shown.definition == '"int"') is has_definition
    assert shown.revision_id == "0a0b0c0d" and shown.type == schema_pb2.Schema.AVRO
    assert _revision().proto.definition == '"int"'  # the stored proto is left as it was


@pytest.mark.parametrize("view", [-1, 3, 99])
def test_unknown_views_are_invalid(view: int) -> None:
    with pytest.raises(InvalidArgument, match="Invalid view"):
        schemas._check_view(view)
