"""Labels of the early API <-> attributes of v1 (pure).

A label's `str_value` is the attribute's value as it is; a `num_value` is its decimal string,
and the attribute's name is listed in the record's NUMERIC_HEADER (translate/records.py), so
that an early-API subscriber gets it back as a number. Attributes published through v1 come
back as `str_value` labels.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from gateway._pb.tech.label import label_pb2
from gateway.errors import InvalidArgument, quote

_DECIMAL = re.compile(r"-?(0|[1-9][0-9]*)")
_INT64 = range(-(2**63), 2**63)


def to_attributes(
    labels: Sequence[label_pb2.Label], where: str = "label"
) -> tuple[dict[str, str], tuple[str, ...]]:
    """(attributes, names of the numeric ones) of a message's labels. INVALID_ARGUMENT for a
    label without a key or without a value, and for a key given twice."""
    attributes: dict[str, str] = {}
    numeric: list[str] = []
    for i, label in enumerate(labels):
        if not label.key:
            raise InvalidArgument(f"Label {i} has no key ({where}[{i}].key).")
        if label.key in attributes:
            raise InvalidArgument(
                f"Label key {quote(label.key)} is given twice ({where}[{i}].key); keys must be unique."
            )
        kind = label.WhichOneof("value")
        if kind is None:
            raise InvalidArgument(
                f"Label {quote(label.key)} has no value ({where}[{i}]): set str_value or num_value."
            )
        if kind == "num_value":
            attributes[label.key] = str(label.num_value)
            numeric.append(label.key)
        else:
            attributes[label.key] = label.str_value
    return attributes, tuple(numeric)


def number(text: str) -> int | None:
    """The int64 a decimal string is exactly (as str() writes it), else None."""
    if not _DECIMAL.fullmatch(text):
        return None
    n = int(text)
    return n if n in _INT64 else None


def to_labels(attributes: Mapping[str, str], numeric: Iterable[str] = ()) -> list[label_pb2.Label]:
    """A message's labels: attributes named in `numeric` whose value is an int64 in decimal as
    num_value, all others as str_value, in the attributes' order."""
    numbers = frozenset(numeric)
    out: list[label_pb2.Label] = []
    for key, value in attributes.items():
        n = number(value) if key in numbers else None
        if n is None:
            out.append(label_pb2.Label(key=key, str_value=value))
        else:
            out.append(label_pb2.Label(key=key, num_value=n))
    return out
