"""Schema names and revision ids (gateway.schemas.names)."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from gateway.errors import InvalidArgument
from gateway.schemas import (
    is_revision_id,
    new_revision_id,
    schema_name,
    schema_name_for,
    split_revision,
    with_revision,
)


def test_schema_names_follow_the_resource_name_rules() -> None:
    assert schema_name("projects/p-1/schemas/my-schema") == "projects/p-1/schemas/my-schema"
    assert schema_name_for("projects/p", "s~+%._-1") == "projects/p/schemas/s~+%._-1"
    for bad in [
        "projects/p/topics/abc",
        "projects/p/schemas/ab",  # 3 to 255 characters
        "projects/p/schemas/" + "a" * 256,
        "projects/p/schemas/1abc",  # starts with a letter
        "projects/p/schemas/goog-schema",
        "projects/p/schemas/a b c",
        "projects//schemas/abc",
        "projects/p/schemas/abc/extra",
    ]:
        with pytest.raises(InvalidArgument, match=re.escape(f"Invalid resource name given (name={bad})")):
            schema_name(bad)
    schema_name("projects/p/schemas/" + "a" * 255)
    with pytest.raises(InvalidArgument, match="Invalid resource name"):
        schema_name_for("projects/p", "no")
    with pytest.raises(InvalidArgument, match="Invalid resource name"):
        schema_name_for("organizations/p", "abc")


def test_a_revision_is_named_with_an_at_sign() -> None:
    assert split_revision("projects/p/schemas/abc") == ("projects/p/schemas/abc", None)
    assert split_revision("projects/p/schemas/abc@c7cfa2a8") == ("projects/p/schemas/abc", "c7cfa2a8")
    name, revision = split_revision("projects/p/schemas/abc@0a0b0c0d")
    assert revision is not None and with_revision(name, revision) == "projects/p/schemas/abc@0a0b0c0d"
    for bad in [
        "projects/p/schemas/abc@",
        "projects/p/schemas/ab@0a0b0c0d",
        "projects/p/topics/abc@0a0b0c0d",
    ]:
        with pytest.raises(InvalidArgument, match=re.escape(f"(name={bad})")):
            split_revision(bad)


def test_revision_ids_are_eight_lowercase_hex_characters() -> None:
    ids = {new_revision_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(re.fullmatch(r"[0-9a-f]{8}", rid) and is_revision_id(rid) for rid in ids)
    assert (
        not is_revision_id("C7CFA2A8") and not is_revision_id("c7cfa2a") and not is_revision_id("c7cfa2a8 ")
    )


def test_a_new_revision_id_is_none_of_the_schemas_others() -> None:
    drawn = itertools.cycle(["0000000a", "0000000b", "0000000c"])
    assert new_revision_id(taken={"0000000a", "0000000b"}, token=lambda n: next(drawn)) == "0000000c"
    with pytest.raises(ValueError, match="lowercase hex"):
        new_revision_id(token=lambda n: "ABCDEF12")


@hsettings(max_examples=100, deadline=None, database=None)
@given(st.sets(st.from_regex(r"[0-9a-f]{8}", fullmatch=True), max_size=19))
def test_new_revision_ids_avoid_any_taken_set(taken: set[str]) -> None:
    fresh = new_revision_id(taken)
    assert fresh not in taken and is_revision_id(fresh)
