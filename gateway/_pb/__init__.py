"""Generated protobuf/gRPC code for the Pub/Sub v1 API.

Everything below this package is produced by ``python -m gateway.protogen``
from ``protos/``; do not edit it by hand. Import it as
``from gateway._pb.google.pubsub.v1 import pubsub_pb2, pubsub_pb2_grpc``.
"""
