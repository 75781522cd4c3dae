"""The gRPC wire of google.pubsub.v1.SchemaService: every method, each through `_guard`
(authentication, IAM, error statuses) as the Publisher's and Subscriber's are. REST reaches the
same methods (rest.py). Handlers only translate; the semantics are in core/schemas.py."""

from __future__ import annotations

from google.protobuf.message import Message

from gateway._pb.google.pubsub.v1 import schema_pb2 as spb
from gateway._pb.google.pubsub.v1 import schema_pb2_grpc as spb_grpc
from gateway.core.schemas import SchemaService
from gateway.wire.access import CallGuard, Context
from gateway.wire.grpc_api import _EMPTY, Servicer, _guard


class Schemas(Servicer, spb_grpc.SchemaServiceServicer):
    SERVICE = "google.pubsub.v1.SchemaService"

    def __init__(self, guard: CallGuard, schemas: SchemaService) -> None:
        super().__init__(guard)
        self._schemas = schemas

    @_guard
    async def CreateSchema(self, request: spb.CreateSchemaRequest, context: Context) -> spb.Schema:
        return await self._schemas.create(request.parent, request.schema, request.schema_id)

    @_guard
    async def GetSchema(self, request: spb.GetSchemaRequest, context: Context) -> spb.Schema:
        return self._schemas.get(request.name, request.view)

    @_guard
    async def ListSchemas(self, request: spb.ListSchemasRequest, context: Context) -> spb.ListSchemasResponse:
        found, token = self._schemas.list_page(
            request.parent, request.view, request.page_size, request.page_token
        )
        return spb.ListSchemasResponse(schemas=found, next_page_token=token)

    @_guard
    async def ListSchemaRevisions(
        self, request: spb.ListSchemaRevisionsRequest, context: Context
    ) -> spb.ListSchemaRevisionsResponse:
        found, token = self._schemas.list_revisions(
            request.name, request.view, request.page_size, request.page_token
        )
        return spb.ListSchemaRevisionsResponse(schemas=found, next_page_token=token)

    @_guard
    async def CommitSchema(self, request: spb.CommitSchemaRequest, context: Context) -> spb.Schema:
        return await self._schemas.commit(request.name, request.schema)

    @_guard
    async def RollbackSchema(self, request: spb.RollbackSchemaRequest, context: Context) -> spb.Schema:
        return await self._schemas.rollback(request.name, request.revision_id)

    @_guard
    async def DeleteSchemaRevision(
        self, request: spb.DeleteSchemaRevisionRequest, context: Context
    ) -> spb.Schema:
        return await self._schemas.delete_revision(request.name, request.revision_id)

    @_guard
    async def DeleteSchema(self, request: spb.DeleteSchemaRequest, context: Context) -> Message:
        await self._schemas.delete(request.name)
        return _EMPTY()

    @_guard
    async def ValidateSchema(
        self, request: spb.ValidateSchemaRequest, context: Context
    ) -> spb.ValidateSchemaResponse:
        await self._schemas.validate_schema(request.parent, request.schema)
        return spb.ValidateSchemaResponse()

    @_guard
    async def ValidateMessage(
        self, request: spb.ValidateMessageRequest, context: Context
    ) -> spb.ValidateMessageResponse:
        inline = request.schema if request.HasField("schema") else None
        await self._schemas.validate_message(
            request.parent, request.name, inline, request.message, request.encoding
        )
        return spb.ValidateMessageResponse()
