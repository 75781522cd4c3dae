"""Subscription filters in Spark SQL: the gateway's parsed filter compiled into a Column.

The language is parsed once, by gateway/translate/filters.py (`parse_expression`), and its tree
becomes a boolean condition on the `attributes` map column (spark/messages.py maps headers to
attributes exactly as the gateway does), with the gateway's meanings:

    attributes:K             map_contains_key
    attributes.K = "v"       present and equal            (never null: an absent key is false)
    attributes.K != "v"      NOT (attributes.K = "v")     (an absent key is true)
    hasPrefix(attributes.K, "p")  present and startswith  (byte prefixes of UTF-8 strings are
                                                          code point prefixes)
    NOT, AND, OR             ~, &, |  on conditions that are never null

Spark SQL only, no Python UDF: executors run no Python of this project. A literal that is not
encodable as UTF-8 (a lone surrogate written as \\uD800) never equals nor prefixes an attribute,
which is always valid UTF-8, and a key of that kind is never present: such atoms are constants.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from gateway.translate import filters
from gateway.translate.filters import And, Equals, Has, HasPrefix, Not, NotEquals, Or


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _value(attributes: Column, key: str) -> Column:
    return F.try_element_at(attributes, F.lit(key))


def condition(expr: filters.Expr, attributes: Column) -> Column:
    """A never-null boolean Column: whether the message with `attributes` matches `expr`."""
    match expr:
        case Has(key):
            return F.map_contains_key(attributes, F.lit(key)) if _utf8(key) else F.lit(False)
        case Equals(key, value):
            if not (_utf8(key) and _utf8(value)):
                return F.lit(False)
            return F.coalesce(_value(attributes, key) == F.lit(value), F.lit(False))
        case NotEquals(key, value):
            return ~condition(Equals(key, value), attributes)
        case HasPrefix(key, prefix):
            if not (_utf8(key) and _utf8(prefix)):
                return F.lit(False)
            return F.coalesce(_value(attributes, key).startswith(F.lit(prefix)), F.lit(False))
        case Not(inner):
            return ~condition(inner, attributes)
        case And(parts):
            out = condition(parts[0], attributes)
            for part in parts[1:]:
                out = out & condition(part, attributes)
            return out
        case Or(parts):
            out = condition(parts[0], attributes)
            for part in parts[1:]:
                out = out | condition(part, attributes)
            return out


def compile_filter(text: str, attributes: Column | None = None) -> Column | None:
    """The filter `text` as a condition on `attributes` (the column `attributes` by default), or
    None for the empty filter. The stored filter was checked when it was set; it is parsed
    without the API's 256-byte limit, as delivery does (a legacy label query's translation may
    be longer)."""
    expr = filters.parse_expression(text, max_bytes=None)
    if expr is None:
        return None
    return condition(expr, F.col("attributes") if attributes is None else attributes)


def apply(df: DataFrame, text: str) -> DataFrame:
    """The rows of `df` (Pub/Sub columns) whose attributes match the filter `text`."""
    cond = compile_filter(text)
    return df if cond is None else df.where(cond)
