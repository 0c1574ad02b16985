"""The small part of the W&B API that ``weave.init`` asks before it talks to the trace service, so
that ``WANDB_BASE_URL=<server url>`` and ``WANDB_API_KEY=<key>`` are all a researcher's existing
``@weave.op`` code needs to record here.

``POST /graphql`` (authenticated like every route; Weave sends Basic ``api:<key>``) runs a GraphQL
schema of the fields Weave 0.52 reads: ``viewer { username defaultEntity { name } }`` (the user and
their default entity), ``project(name, entityName) { name }`` (does the project exist) and
``upsertModel(input) { model { name } }`` (create it). The caller's entity is their user name, as on
the training API; a trace project of the caller exists as soon as it is named (the trace service
creates it on its first write), so every project lookup finds it. Answers follow GraphQL over HTTP:
200 with ``data``, and ``errors`` for a query that fails to parse, validate or resolve.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter
from fastapi.responses import Response
from graphql import GraphQLError, build_schema, execute_sync, parse, validate
from pydantic import BaseModel, ConfigDict, Field

from ..errors import BadRequest
from ..store.users import User
from .routes.wire import User_
from .store import check_project_id

MAX_TOKENS = 1000
SCHEMA = build_schema(
    """
    type Query {
      viewer: User
      project(name: String!, entityName: String): Project
    }
    type Mutation {
      upsertModel(input: UpsertModelInput!): UpsertModelPayload
    }
    type User { id: ID!, username: String!, name: String!, defaultEntity: Entity! }
    type Entity { id: ID!, name: String! }
    type Project { id: ID!, name: String!, entityName: String!, description: String }
    input UpsertModelInput {
      id: String
      name: String
      entityName: String
      description: String
      repo: String
    }
    type UpsertModelPayload { model: Project!, inserted: Boolean! }
    """
)

router = APIRouter(tags=["wandb"])


class GraphQLRequest(BaseModel):
    """A GraphQL-over-HTTP request body."""

    model_config = ConfigDict(populate_by_name=True)

    query: str
    variables: dict[str, Any] | None = None
    operation_name: str | None = Field(default=None, alias="operationName")


class GraphQLResponse(BaseModel):
    data: dict[str, Any] | None = None
    errors: list[dict[str, Any]] | None = None


class Root:
    """The resolvers of ``Query`` and ``Mutation`` for one user (fields resolve from the dicts)."""

    def __init__(self, user: User) -> None:
        self.user = user

    def _project(self, entity: str | None, name: str, description: str | None = None) -> dict[str, Any]:
        """The project ``entity/name`` (the caller's entity by default); a GraphQL error when the
        pair is not a trace project id."""
        entity = entity or self.user.name
        try:
            project_id = check_project_id(f"{entity}/{name}")
        except BadRequest as exc:
            raise GraphQLError(str(exc)) from exc
        return {"id": project_id, "name": name, "entityName": entity, "description": description}

    def viewer(self, _info: Any) -> dict[str, Any]:
        name = self.user.name
        entity = {"id": name, "name": name}
        return {"id": self.user.id, "username": name, "name": name, "defaultEntity": entity}

    def project(self, _info: Any, name: str, entityName: str | None = None) -> dict[str, Any]:
        return self._project(entityName, name)

    def upsertModel(self, _info: Any, input: dict[str, Any]) -> dict[str, Any]:
        if not input.get("name"):
            raise GraphQLError("upsertModel needs a project name")
        project = self._project(input.get("entityName"), input["name"], input.get("description"))
        return {"model": project, "inserted": False}


def run(request: GraphQLRequest, user: User) -> dict[str, Any]:
    """The GraphQL result of ``request`` as ``{"data": ..., "errors": [...]}``."""
    try:
        document = parse(request.query, max_tokens=MAX_TOKENS)
    except GraphQLError as exc:
        return {"data": None, "errors": [exc.formatted]}
    except RecursionError:
        return {"data": None, "errors": [{"message": "Query nested too deeply"}]}
    errors = validate(SCHEMA, document)
    if errors:
        return {"data": None, "errors": [e.formatted for e in errors]}
    result = execute_sync(
        SCHEMA,
        document,
        root_value=Root(user),
        variable_values=request.variables,
        operation_name=request.operation_name,
    )
    return dict(result.formatted)


@router.post("/graphql", response_model=GraphQLResponse)
def graphql(request: GraphQLRequest, user: User_) -> Response:
    """W&B's GraphQL endpoint, as far as ``weave.init`` uses it."""
    return Response(orjson.dumps(run(request, user)), media_type="application/json")
