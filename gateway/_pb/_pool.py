"""The descriptor pool of the gateway's generated protos, apart from protobuf's default pool.

The official client libraries register the same `google.pubsub.v1` descriptors in the default
pool; two registrations of one name conflict. Ours go here, so the gateway's code and an
official client can share a process (the in-process test tier does). The files ours import
(well-known types, google.api annotations) are copied in from their installed modules, in
dependency order.
"""

from __future__ import annotations

from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor import FileDescriptor
from google.protobuf.message import Message

from google.api import annotations_pb2, client_pb2, field_behavior_pb2, resource_pb2
from google.protobuf import duration_pb2, empty_pb2, field_mask_pb2, struct_pb2, timestamp_pb2

POOL = descriptor_pool.DescriptorPool()


def _add(file: FileDescriptor, done: set[str]) -> None:
    if file.name in done:
        return
    for dep in file.dependencies:
        _add(dep, done)
    POOL.AddSerializedFile(file.serialized_pb)
    done.add(file.name)


_added: set[str] = set()
for _module in (annotations_pb2, client_pb2, field_behavior_pb2, resource_pb2,
                duration_pb2, empty_pb2, field_mask_pb2, struct_pb2, timestamp_pb2):
    _add(_module.DESCRIPTOR, _added)


def message_class(full_name: str) -> type[Message]:
    """The class of a message of this pool, e.g. `google.protobuf.Empty`."""
    return message_factory.GetMessageClass(POOL.FindMessageTypeByName(full_name))
