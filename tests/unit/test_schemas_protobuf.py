"""Protocol Buffer schemas (gateway.schemas.protobuf): definitions compiled by protoc into a
private descriptor pool, and messages in the wire format and in protobuf's JSON mapping."""

from __future__ import annotations

import json

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, json_format
from google.protobuf.message import Message
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from gateway.errors import Code, Unavailable
from gateway.schemas import Encoding, ProtoSchema, SchemaError, SchemaType, compile_schema
from gateway.schemas import protobuf as protobuf_module

ORDER = """
syntax = "proto3";
package shop.v1;

message Order {
  enum Status { NEW = 0; PAID = 1; }
  message Line {
    string sku = 1;
    int32 qty = 2;
  }
  string id = 1;
  int64 amount_micros = 2;
  Status status = 3;
  repeated Line lines = 4;
  map<string, Line> by_sku = 5;
  oneof contact { string email = 6; string phone = 7; }
  optional double discount = 8;
  bytes raw = 9;
}
"""

LEGACY = """
syntax = "proto2";
message Legacy {
  required string id = 1;
  optional Inner inner = 2;
  message Inner { required int32 n = 1; }
}
"""


def _compile(definition: str) -> ProtoSchema:
    schema = compile_schema(SchemaType.PROTOCOL_BUFFER, definition)
    assert isinstance(schema, ProtoSchema)
    return schema


@pytest.fixture(scope="module")
def order() -> ProtoSchema:
    return _compile(ORDER)


@pytest.fixture(scope="module")
def legacy() -> ProtoSchema:
    return _compile(LEGACY)


def _order(schema: ProtoSchema) -> Message:
    return schema.message_class(
        id="o-1",
        amount_micros=2_500_000,
        status=1,
        lines=[{"sku": "s-1", "qty": 2}],
        by_sku={"s-1": {"sku": "s-1", "qty": 2}},
        email="a@example.com",
        raw=b"\x00\xff",
    )


def refused(schema: ProtoSchema, data: bytes, encoding: Encoding) -> str:
    with pytest.raises(SchemaError) as caught:
        schema.validate(data, encoding)
    return caught.value.message


# --- definitions ---------------------------------------------------------------------------


def test_a_definition_compiles_into_a_pool_of_its_own(order: ProtoSchema) -> None:
    assert order.root_message == "shop.v1.Order"
    assert order.message_class.DESCRIPTOR.full_name == "shop.v1.Order"
    with pytest.raises(KeyError):
        descriptor_pool.Default().FindMessageTypeByName("shop.v1.Order")
    files = descriptor_pb2.FileDescriptorSet.FromString(order.descriptor_set).file
    assert [f.package for f in files] == ["shop.v1"]
    assert [m.name for m in files[0].message_type] == ["Order"]


def test_schemas_of_one_name_do_not_collide() -> None:
    """Each compiles into its own pool: two revisions of one message, and a message named like
    the API's own (which the gateway's pool and the official client's default pool hold)."""
    first = _compile('syntax = "proto3"; package google.pubsub.v1; message Topic { string name = 1; }')
    second = _compile('syntax = "proto3"; package google.pubsub.v1; message Topic { int64 name = 1; }')
    first.validate(b'{"name": "x"}', Encoding.JSON)
    second.validate(b'{"name": "5"}', Encoding.JSON)
    assert "name" in refused(second, b'{"name": "x"}', Encoding.JSON)


@pytest.mark.parametrize(
    "definition",
    [
        "message NoSyntax { optional int32 a = 1; }",
        'syntax = "proto2"; message M { extensions 100 to 199; extend M { optional int32 x = 100; } }',
        'syntax = "proto3"; message Empty {}',
        'syntax = "proto3"; message M { message A { B b = 1; } message B { int32 n = 1; } A a = 1; }',
    ],
)
def test_valid_definitions_compile(definition: str) -> None:
    assert _compile(definition).type is SchemaType.PROTOCOL_BUFFER


@pytest.mark.parametrize(
    ("definition", "says"),
    [
        (
            'syntax = "proto3"; message A {} message B {}',
            "exactly one top-level type, a message (nest the others inside it); found message A, message B",
        ),
        ('syntax = "proto3"; enum E { Z = 0; } message M { E e = 1; }', "found message M, enum E"),
        ('syntax = "proto3"; enum E { Z = 0; }', "found enum E"),
        ('syntax = "proto3"; message M {} service S { rpc Get(M) returns (M); }', "service S"),
        (
            'syntax = "proto2"; message M { extensions 1 to 9; } extend M { optional int32 x = 1; }',
            "extension x",
        ),
        ('syntax = "proto3";', "found none"),
        (
            'syntax = "proto3"; import "google/protobuf/timestamp.proto"; message M { google.protobuf.Timestamp t = 1; }',
            "imports are not supported (it imports google/protobuf/timestamp.proto)",
        ),
        ('syntax = "proto3"; import "other.proto"; message M {}', "other.proto: File not found"),
        ('syntax = "proto3"; import "/etc/passwd"; message M {}', "/etc/passwd"),
        (
            'edition = "2023"; message M { int32 a = 1; }',
            "only proto2 and proto3 are supported, not editions",
        ),
        ('syntax = "proto3";\nmessage M {\n  strin a = 1;\n}', 'line 3, column 3: "strin" is not defined'),
        ('syntax = "proto3"; message M { int32 a = 1; int32 b = 1; }', "has already been used"),
        ("this is not a proto file", "line 1, column 1"),
    ],
)
def test_invalid_definitions_are_refused_in_protocs_words(definition: str, says: str) -> None:
    with pytest.raises(SchemaError, match=r"^Invalid Protocol Buffer schema: ") as caught:
        _compile(definition)
    assert says in caught.value.message
    assert "/tmp/" not in caught.value.message and "WARNING" not in caught.value.message


def test_protoc_diagnostics_are_bounded() -> None:
    definition = (
        'syntax = "proto3"; message M { ' + " ".join(f"strin f{i} = {i + 1};" for i in range(200)) + " }"
    )
    with pytest.raises(SchemaError) as caught:
        _compile(definition)
    assert len(caught.value.message) < 700 and caught.value.message.endswith("\u2026")


def test_a_protoc_that_does_not_finish_in_time_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(protobuf_module, "PROTOC_TIMEOUT_S", 0.001)
    with pytest.raises(Unavailable, match="took over") as caught:
        _compile('syntax = "proto3"; message M {}')
    assert caught.value.code is Code.UNAVAILABLE


# --- binary --------------------------------------------------------------------------------


def test_a_valid_binary_message_validates(order: ProtoSchema) -> None:
    order.validate(_order(order).SerializeToString(), Encoding.BINARY)
    order.validate(b"", Encoding.BINARY)  # proto3: every field at its default


def test_fields_the_schema_does_not_have_are_kept_and_accepted(order: ProtoSchema) -> None:
    """As protobuf's parsers do: a publisher on a newer revision of the message stays valid."""
    data = _order(order).SerializeToString() + b"\xf8\x06\x01"  # field 111, varint 1
    order.validate(data, Encoding.BINARY)
    order.validate(b"\x22\x05\x0a\x01s\x18\x07", Encoding.BINARY)  # lines[0] has a field 3


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"\x08\x01", "field id (number 1) arrived with wire type 0, which a field of type string never has"),
        (b"\x22\x02\x10\xff", "truncated or malformed"),  # lines[0].qty cut short
        (b"\x22\x02\x12\x00", "field lines[0].qty (number 2) arrived with wire type 2"),
        (b"\x2a\x07\x0a\x01k\x12\x02\x08\x01", "field by_sku['k'].sku (number 1) arrived with wire type 0"),
        (b"\x0a\x05abc", "truncated or malformed"),
        (b"\x0a\x02\xff\xfe", "truncated or malformed"),  # proto3 strings are UTF-8
        (b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", "truncated or malformed"),
        (b"\x00", "truncated or malformed"),  # field number 0
        (b"\x22" + b"\x80\x80\x80\x80\x08", "truncated or malformed"),  # length past the end
    ],
)
def test_binary_that_does_not_fit_the_message_is_refused(order: ProtoSchema, data: bytes, says: str) -> None:
    message = refused(order, data, Encoding.BINARY)
    assert message.startswith("Invalid Protocol Buffer BINARY message (shop.v1.Order): ")
    assert says in message


def test_trailing_garbage_is_refused(order: ProtoSchema) -> None:
    """The wire format has no end marker: what follows a message is parsed as more fields,
    so garbage fails as malformed data or as a known field of the wrong wire type."""
    data = _order(order).SerializeToString()
    for garbage in (b"\xff", b"\x07", b"\x0b", b"\x08\x01"):
        refused(order, data + garbage, Encoding.BINARY)


def test_nesting_past_protobufs_limit_is_refused() -> None:
    schema = _compile('syntax = "proto3"; message N { N next = 1; }')
    data = b""
    for _ in range(150):
        data = b"\x0a" + _varint(len(data)) + data
    assert "truncated or malformed" in refused(schema, data, Encoding.BINARY)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def test_proto2_required_fields_must_be_present(legacy: ProtoSchema) -> None:
    legacy.validate(b"\x0a\x01x", Encoding.BINARY)
    legacy.validate(b'{"id": "x", "inner": {"n": 1}}', Encoding.JSON)
    assert "required fields are missing: id" in refused(legacy, b"", Encoding.BINARY)
    assert "required fields are missing: inner.n" in refused(legacy, b"\x0a\x01x\x12\x00", Encoding.BINARY)
    assert "required fields are missing: inner.n" in refused(
        legacy, b'{"id": "x", "inner": {}}', Encoding.JSON
    )


def test_required_fields_are_looked_for_only_where_a_message_has_one(
    order: ProtoSchema, legacy: ProtoSchema
) -> None:
    """IsInitialized is skipped for files with no required field anywhere (every proto3 file);
    one required field nested two levels down is enough to keep it."""
    assert not order.has_required and legacy.has_required
    deep = _compile(
        'syntax = "proto2";\n'
        "message Top { optional Mid mid = 1;\n"
        "  message Mid { optional Low low = 1; message Low { required int32 n = 1; } } }\n"
    )
    assert deep.has_required
    deep.validate(b"\x0a\x04\x0a\x02\x08\x01", Encoding.BINARY)
    with pytest.raises(SchemaError, match=r"required fields are missing: mid\.low\.n"):
        deep.validate(b"\x0a\x02\x0a\x00", Encoding.BINARY)  # mid.low present, its n missing


# --- JSON ----------------------------------------------------------------------------------


def test_a_valid_json_message_validates(order: ProtoSchema) -> None:
    order.validate(json_format.MessageToJson(_order(order)).encode(), Encoding.JSON)
    order.validate(
        b'{"id": "x", "amountMicros": "5", "status": "PAID", "lines": [{"sku": "s"}]}', Encoding.JSON
    )
    order.validate(b'{"amount_micros": 5, "status": 1}', Encoding.JSON)  # field names and numbers too
    order.validate(b"{}", Encoding.JSON)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b'{"id": 1}', "id"),
        (b'{"nope": 1}', 'has no field named "nope"'),
        (b'{"status": "LOST"}', "Invalid enum value LOST"),
        (b'{"lines": {"sku": "s"}}', "lines"),
        (b'{"lines": [{"qty": "many"}]}', "qty"),
        (b'{"email": "a", "phone": "b"}', "oneof"),
        (b'{"id": "x"} {}', "Extra data"),
        (b"[]", "must be a JSON object"),
        (b' "x"', "must be a JSON object"),
        (b'{"id": "x", "id": "y"}', "duplicate key"),
        (b"", "must be a JSON object"),
        (b"\xff", "not UTF-8"),
    ],
)
def test_json_that_does_not_fit_the_message_is_refused(order: ProtoSchema, data: bytes, says: str) -> None:
    message = refused(order, data, Encoding.JSON)
    assert message.startswith("Invalid Protocol Buffer JSON message (shop.v1.Order): ")
    assert says in message


# --- hypothesis: messages built from drawn values, in both encodings -----------------------

lines = st.lists(
    st.fixed_dictionaries({"sku": st.text(max_size=8), "qty": st.integers(-(2**31), 2**31 - 1)}), max_size=3
)
orders = st.fixed_dictionaries(
    {
        "id": st.text(max_size=12),
        "amount_micros": st.integers(-(2**63), 2**63 - 1),
        "status": st.sampled_from([0, 1]),
        "lines": lines,
        "raw": st.binary(max_size=12),
    },
    optional={
        "email": st.text(max_size=8),
        "discount": st.floats(allow_nan=False),
        "by_sku": st.dictionaries(
            st.text(max_size=4), st.fixed_dictionaries({"sku": st.text(max_size=4)}), max_size=2
        ),
    },
)


@hsettings(max_examples=150, deadline=None, database=None)
@given(orders)
def test_every_message_protobuf_writes_validates(order: ProtoSchema, fields: dict[str, object]) -> None:
    message = order.message_class(**fields)
    data = message.SerializeToString()
    order.validate(data, Encoding.BINARY)
    order.validate(json_format.MessageToJson(message).encode(), Encoding.JSON)
    with pytest.raises(SchemaError):
        order.validate(data + b"\xff", Encoding.BINARY)  # a tag that never ends


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["id", "status", "lines", "sku", "qty", "by_sku", "raw", "x"]), inner, max_size=4
        )
    ),
    max_leaves=12,
)


@hsettings(max_examples=300, deadline=None, database=None)
@given(json_values.map(lambda v: {"lines": v} if isinstance(v, dict) else v), st.binary(max_size=32))
def test_arbitrary_input_either_validates_or_is_a_schema_error(
    order: ProtoSchema, value: object, data: bytes
) -> None:
    """No input may end in another exception: the publish path turns SchemaError, and only it,
    into INVALID_ARGUMENT."""
    for payload, encoding in ((json.dumps(value).encode(), Encoding.JSON), (data, Encoding.BINARY)):
        try:
            order.validate(payload, encoding)
        except SchemaError:
            pass
