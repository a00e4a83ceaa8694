"""The OpenAPI 3.1 description of the registry's HTTP API (``GET /openapi.json``).

The schemas are the spec's own definitions (``uap-schema.json``) moved under
``components/schemas``; OpenAPI 3.1 schemas are JSON Schema, so they carry over
unchanged except for where their ``$ref`` s point.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

from actorbus.codecs.uap import uap_schema

INDEX_HEADER = "X-Registry-Index"


def _move_refs(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: (
                v.replace("#/definitions/", "#/components/schemas/")
                if k == "$ref" and isinstance(v, str)
                else _move_refs(v)
            )
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_move_refs(v) for v in node]
    return node


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(name: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(name)}}}


def _error(description: str) -> dict[str, Any]:
    return _json("Error", description)


def _body(name: str) -> dict[str, Any]:
    return {
        "required": True,
        "description": "JSON (a request without Content-Type is read as JSON too)",
        "content": {"application/json": {"schema": _ref(name)}},
    }


def _path_param(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string"},
    }


def _query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


_BLOCKING = [
    _query(
        "index",
        f"blocking query: answer once the index is above this (the {INDEX_HEADER} "
        "header of the previous answer)",
        {"type": "integer", "minimum": 0},
    ),
    _query(
        "wait",
        "blocking query: the longest wait, e.g. '30s', '500ms' or seconds "
        "(default 5m, at most 10m)",
        {"type": "string"},
    ),
]

_INDEX = {
    INDEX_HEADER: {
        "description": "the registry index the answer reflects (0: nothing yet)",
        "schema": {"type": "integer", "minimum": 0},
    }
}

_INVALID = _error("invalid body or parameter; 'field' names it")
_NOT_JSON = _error("the body is not JSON")
_UNKNOWN = _error("no such service or route")
_CONFLICT = _error("conflicts with what is stored")


def _ok_list(name: str, description: str) -> dict[str, Any]:
    return {**_json(name, description), "headers": _INDEX}


def _paths() -> dict[str, Any]:
    service = _path_param("service", "GET: a service name (or id); PATCH and DELETE: a service id")
    route = _path_param("name", "the route's name")
    sid = _path_param("id", "the service id")
    return {
        "/services": {
            "post": {
                "operationId": "createService",
                "summary": "Register a service",
                "requestBody": _body("CreateServiceRequest"),
                "responses": {
                    "201": _json("ServiceResponse", "registered"),
                    "400": _INVALID,
                    "409": _error("a service with this id exists"),
                    "415": _NOT_JSON,
                },
            },
            "get": {
                "operationId": "listServices",
                "summary": "All services (a blocking query with index and wait)",
                "parameters": [
                    *_BLOCKING,
                    _query(
                        "tag", "only services carrying this tag (repeatable)", {"type": "string"}
                    ),
                    _query(
                        "agent_protocol", "only services of this agent protocol", {"type": "string"}
                    ),
                    _query("health_status", "healthy or unhealthy", {"type": "string"}),
                ],
                "responses": {
                    "200": _ok_list("GetAllServiceSuccessResponse", "the services"),
                    "400": _INVALID,
                },
            },
        },
        "/services/{service}": {
            "parameters": [service],
            "get": {
                "operationId": "getServices",
                "summary": "The instances of a service, by name",
                "responses": {
                    "200": _ok_list("GetServiceSuccessResponse", "the instances"),
                    "404": _UNKNOWN,
                },
            },
            "patch": {
                "operationId": "updateService",
                "summary": "Update a service (the body's fields replace the stored ones)",
                "requestBody": _body("UpdateServiceRequest"),
                "responses": {
                    "200": _json("ServiceResponse", "updated"),
                    "400": _INVALID,
                    "404": _UNKNOWN,
                    "409": _error("would change the kind (ephemeral) of the service"),
                    "415": _NOT_JSON,
                },
            },
            "delete": {
                "operationId": "deleteService",
                "summary": "Deregister a service",
                "responses": {"204": {"description": "deleted"}, "404": _UNKNOWN},
            },
        },
        "/services/{id}/renewal": {
            "parameters": [sid],
            "put": {
                "operationId": "renewService",
                "summary": "Renew an ephemeral service (an unhealthy one becomes healthy)",
                "responses": {
                    "204": {"description": "renewed"},
                    "404": _error("unknown (deleted after missing renewals): register again"),
                    "409": _error("the service is persistent (the registry checks it)"),
                },
            },
        },
        "/routes": {
            "post": {
                "operationId": "createRoute",
                "summary": "Create a route",
                "requestBody": _body("CreateRouteRequest"),
                "responses": {
                    "201": _json("RouteResponse", "created"),
                    "400": _INVALID,
                    "409": _error("a route with this name exists"),
                    "415": _NOT_JSON,
                },
            },
            "get": {
                "operationId": "listRoutes",
                "summary": "All routes (a blocking query with index and wait)",
                "parameters": [
                    *_BLOCKING,
                    _query("service", "only routes to this service", {"type": "string"}),
                ],
                "responses": {
                    "200": _ok_list("GetAllRoutesSuccessResponse", "the routes"),
                    "400": _INVALID,
                },
            },
        },
        "/routes/{name}": {
            "parameters": [route],
            "get": {
                "operationId": "getRoute",
                "summary": "A route by name",
                "responses": {
                    "200": {**_json("GetRotueSuccessResponse", "the route"), "headers": _INDEX},
                    "404": _UNKNOWN,
                },
            },
            "patch": {
                "operationId": "updateRoute",
                "summary": "Update a route (a different name in the body renames it)",
                "requestBody": _body("UpdateRouteRequest"),
                "responses": {
                    "200": _json("RouteResponse", "updated"),
                    "400": _INVALID,
                    "404": _UNKNOWN,
                    "409": _error("the new name is taken"),
                    "415": _NOT_JSON,
                },
            },
            "delete": {
                "operationId": "deleteRoute",
                "summary": "Delete a route",
                "responses": {"204": {"description": "deleted"}, "404": _UNKNOWN},
            },
        },
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document",
                "responses": {"200": {"description": "OpenAPI 3.1"}},
            }
        },
        "/status": {
            "get": {
                "operationId": "status",
                "summary": "This instance: id, whether it leads, counts and index",
                "responses": {"200": _json("Status", "the instance's status")},
            }
        },
    }


@functools.cache
def _document() -> dict[str, Any]:
    schemas = _move_refs(copy.deepcopy(uap_schema()["definitions"]))
    schemas["Error"] = {
        "type": "object",
        "required": ["error", "message"],
        "properties": {
            "error": {"type": "string", "description": "a stable code, e.g. invalid_request"},
            "message": {"type": "string"},
            "field": {"type": "string", "description": "JSON path of the invalid field (400)"},
        },
    }
    schemas["Status"] = {
        "type": "object",
        "properties": {
            "instance": {"type": "string"},
            "namespace": {"type": "string"},
            "leader": {"type": "boolean"},
            "leader_instance": {"type": ["string", "null"]},
            "services": {"type": "integer"},
            "routes": {"type": "integer"},
            "index": {"type": "integer"},
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "actorbus UAP registry",
            "version": "1.0.0",
            "description": "Service registry and gateway routes of the UAP specification "
            "(ephemeral and persistent services, blocking queries), on NATS JetStream.",
        },
        "paths": _paths(),
        "components": {"schemas": schemas},
    }


def openapi_document() -> dict[str, Any]:
    """The document (a fresh copy: callers may change it)."""
    return copy.deepcopy(_document())
