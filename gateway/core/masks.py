"""Applying an update mask: copy the named fields from one proto to another.

A path names a top-level field (`labels`) or a field inside singular message fields
(`schema_settings.first_revision_id`, as Google's own samples of UpdateTopic send). The field
takes the value it has in the request, its default when the request lacks a message on the
way (so a path can clear a field), and nothing else of the stored messages around it changes.
protobuf's `FieldMask.MergeMessage` is not used: where the source lacks a message on the way
it leaves the destination alone, which would ignore a path sent to clear a field.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from gateway.errors import InvalidArgument


def apply(src: Message, dst: Message, mask: Sequence[str], updatable: Collection[str]) -> frozenset[str]:
    """Copy the fields named in `mask` from src to dst; unknown or immutable fields are refused
    (before anything is copied). Returns the top-level fields the paths touch."""
    if not mask:
        raise InvalidArgument("update_mask must name at least one field to update.")
    for path in mask:
        _check(dst.DESCRIPTOR, path, updatable)
    for path in mask:
        _copy(src, dst, path.split("."))
    return touched(mask)


def touched(mask: Sequence[str]) -> frozenset[str]:
    """The top-level fields the paths of `mask` name or reach into."""
    return frozenset(path.split(".", 1)[0] for path in mask)


def _check(descriptor: Any, path: str, updatable: Collection[str]) -> None:  # a Descriptor
    *parents, leaf = path.split(".")
    for i, name in enumerate([*parents, leaf]):
        field = descriptor.fields_by_name.get(name)
        if field is None:
            raise InvalidArgument(f"Invalid update_mask provided: unknown field {path!r}.")
        if i < len(parents):
            if field.message_type is None or field.is_repeated:  # maps are repeated too
                raise InvalidArgument(
                    f"Invalid update_mask provided: {path!r} names a field inside {name!r}, "
                    "which is not a message."
                )
            descriptor = field.message_type
    top = parents[0] if parents else leaf
    if top not in updatable:
        raise InvalidArgument(f"Invalid update_mask provided: field {top!r} cannot be updated.")


def _copy(src: Message, dst: Message, parts: list[str]) -> None:
    *parents, leaf = parts
    source: Message | None = src
    for name in parents:
        source = getattr(source, name) if source is not None and source.HasField(name) else None
        if source is None and not dst.HasField(name):
            return  # the default, into a message dst lacks: nothing to clear (and none made)
        dst = getattr(dst, name)
    field = dst.DESCRIPTOR.fields_by_name[leaf]
    dst.ClearField(leaf)
    if source is None:
        return  # the request's value is the default: cleared
    value = getattr(source, leaf)
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        getattr(dst, leaf).update(value)
    elif field.is_repeated:
        getattr(dst, leaf).extend(value)
    elif field.type == FieldDescriptor.TYPE_MESSAGE:
        if source.HasField(leaf):
            getattr(dst, leaf).CopyFrom(value)
    else:
        setattr(dst, leaf, value)
