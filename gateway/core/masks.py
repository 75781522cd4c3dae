"""Applying an update mask: copy the named top-level fields from one proto to another."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from gateway.errors import InvalidArgument


def apply(src: Message, dst: Message, mask: Sequence[str], updatable: Collection[str]) -> None:
    """Copy the fields named in `mask` from src to dst; unknown or immutable fields are refused."""
    if not mask:
        raise InvalidArgument("update_mask must name at least one field to update.")
    fields = dst.DESCRIPTOR.fields_by_name
    for path in mask:
        if path not in fields:
            raise InvalidArgument(f"Invalid update_mask provided: unknown field {path!r}.")
        if path not in updatable:
            raise InvalidArgument(f"Invalid update_mask provided: field {path!r} cannot be updated.")
    for path in mask:
        field = fields[path]
        dst.ClearField(path)
        value = getattr(src, path)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            getattr(dst, path).update(value)
        elif field.is_repeated:
            getattr(dst, path).extend(value)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            if src.HasField(path):
                getattr(dst, path).CopyFrom(value)
        else:
            setattr(dst, path, value)
