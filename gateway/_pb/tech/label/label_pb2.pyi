# mypy: disable-error-code="type-arg"
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class Label(_message.Message):
    __slots__ = ("key", "str_value", "num_value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    STR_VALUE_FIELD_NUMBER: _ClassVar[int]
    NUM_VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    str_value: str
    num_value: int
    def __init__(self, key: _Optional[str] = ..., str_value: _Optional[str] = ..., num_value: _Optional[int] = ...) -> None: ...
