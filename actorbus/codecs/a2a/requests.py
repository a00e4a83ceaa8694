"""A2A JSON-RPC requests, 1.0 and 0.3, both ways: method names by version,
params validated per method, and ``encode_request`` for egress."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from actorbus.codecs.a2a.errors import (
    V03,
    V10,
    A2AError,
    A2AVersion,
    InvalidParamsError,
    InvalidRequestError,
    MethodNotFoundError,
    UnsupportedOperationError,
    VersionNotSupportedError,
    negotiate_version,
)
from actorbus.codecs.a2a.shapes import (
    ConfigShape,
    ListTasksV10,
    SendParamsV03,
    SendParamsV10,
    TaskRefV03,
    TaskRefV10,
    convert_shape,
    extra_fields,
    parse_json,
)
from actorbus.codecs.a2a.types import (
    METHODS_V03,
    METHODS_V10,
    A2ARequest,
    ListTasksParams,
    Method,
    Params,
    SendConfig,
    SendParams,
    TaskRef,
    state_from_wire,
    state_to_wire,
    wire_method,
)
from actorbus.codecs.a2a.wire import message_from, message_to_wire, response_id

# -- requests ---------------------------------------------------------------------------

_TASK_REF_METHODS: Final = frozenset(
    {Method.GET_TASK, Method.CANCEL_TASK, Method.SUBSCRIBE_TO_TASK}
)
_SEND_METHODS: Final = frozenset({Method.SEND_MESSAGE, Method.SEND_STREAMING_MESSAGE})


def _request_id(obj: Mapping[str, Any]) -> str | int | None:
    return response_id(obj, InvalidRequestError)


def _method(name: str, version: A2AVersion) -> Method:
    """The method ``name`` means in ``version``; -32009 if it is the other version's."""
    table, other = (METHODS_V10, METHODS_V03) if version == V10 else (METHODS_V03, METHODS_V10)
    found = table.get(name)
    if found is not None:
        return found
    if name in other:
        if version == V03:
            hint = "send the header `A2A-Version: 1.0`"
        else:
            hint = f"use {METHODS_V03[name].value} (or drop the A2A-Version header)"
        raise VersionNotSupportedError(
            f"method {name!r} is not an A2A {version} method: {hint}",
            metadata={"method": name, "requested": version},
        )
    raise MethodNotFoundError(f"unknown A2A {version} method {name!r}", metadata={"method": name})


def _config(obj: dict[str, Any] | None, where: str) -> SendConfig | None:
    if obj is None:
        return None
    c = convert_shape(obj, ConfigShape, where, InvalidParamsError)
    return SendConfig(
        accepted_output_modes=c.accepted_output_modes,
        history_length=c.history_length,
        blocking=c.blocking,
        return_immediately=c.return_immediately,
        extra=extra_fields(obj, ConfigShape),
    )


def _send_params(obj: dict[str, Any], version: A2AVersion) -> SendParams:
    struct: type[SendParamsV10 | SendParamsV03]
    struct = SendParamsV10 if version == V10 else SendParamsV03
    p = convert_shape(obj, struct, "params", InvalidParamsError)
    return SendParams(
        message=message_from(p.message, "params.message", InvalidParamsError),
        configuration=_config(p.configuration, "params.configuration"),
        metadata=p.metadata,
        tenant=p.tenant if isinstance(p, SendParamsV10) else None,
        extra=extra_fields(obj, struct),
    )


def _task_ref(obj: dict[str, Any], version: A2AVersion) -> TaskRef:
    struct: type[TaskRefV10 | TaskRefV03] = TaskRefV10 if version == V10 else TaskRefV03
    p = convert_shape(obj, struct, "params", InvalidParamsError)
    return TaskRef(
        id=p.id,
        history_length=p.history_length,
        metadata=p.metadata,
        tenant=p.tenant if isinstance(p, TaskRefV10) else None,
        extra=extra_fields(obj, struct),
    )


# What proto3 JSON writes for an enum left at its default: no filter (the A2A
# JavaScript SDK sends "UNRECOGNIZED" when ListTasks is given no status).
_NO_STATUS = frozenset({"UNRECOGNIZED", "TASK_STATE_UNSPECIFIED"})


def _list_tasks(obj: dict[str, Any]) -> ListTasksParams:
    status = obj.get("status")
    if isinstance(status, str) and status in _NO_STATUS:
        obj = {k: v for k, v in obj.items() if k != "status"}
    p = convert_shape(obj, ListTasksV10, "params", InvalidParamsError)
    return ListTasksParams(
        context_id=p.context_id,
        status=None if p.status is None else state_from_wire(p.status),
        page_size=p.page_size,
        page_token=p.page_token,
        history_length=p.history_length,
        status_timestamp_after=p.status_timestamp_after,
        include_artifacts=p.include_artifacts,
        tenant=p.tenant,
        extra=extra_fields(obj, ListTasksV10),
    )


def _params(method: Method, params: Any, version: A2AVersion) -> Params:
    if params is None and method in (Method.LIST_TASKS, Method.GET_EXTENDED_AGENT_CARD):
        return ListTasksParams() if method is Method.LIST_TASKS else None
    if not isinstance(params, dict):
        raise InvalidParamsError(f"`params` of {method.value} must be an object")
    if method in _SEND_METHODS:
        return _send_params(params, version)
    if method in _TASK_REF_METHODS:
        return _task_ref(params, version)
    if method is Method.LIST_TASKS:
        return _list_tasks(params)
    return params


_OPAQUE = frozenset({"metadata", "data"})  # values that are the sender's own JSON


def proto_names(value: Any) -> Any:
    """``value`` with the proto field names of A2A 1.0 (``message_id``) as the JSON
    names (``messageId``): protobuf's JSON mapping lets a parser take either, and
    clients built on the proto send them (the A2A TCK's REST client). The sender's
    own JSON (``metadata``, a data part's ``data``) is left as it came."""
    if isinstance(value, list):
        return [proto_names(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        name = key
        if isinstance(key, str) and "_" in key.strip("_"):
            head, *rest = key.split("_")
            name = head + "".join(w[:1].upper() + w[1:] for w in rest)
            if name in value:  # both spellings: the JSON name wins
                continue
        out[name] = item if name in _OPAQUE else proto_names(item)
    return out


def _decode_request(obj: dict[str, Any], version: str | None) -> A2ARequest:
    rid = _request_id(obj)
    if obj.get("jsonrpc") != "2.0":
        raise InvalidRequestError('`jsonrpc` must be "2.0"')
    name = obj.get("method")
    if not isinstance(name, str) or not name:
        raise InvalidRequestError("`method` must be a non-empty string")
    v = negotiate_version(version)
    if (version is None or not version.strip()) and name in METHODS_V10 and name not in METHODS_V03:
        v = V10  # no header means 0.3, but a 1.0 method name is unambiguous: answer in 1.0
    method = _method(name, v)
    return A2ARequest(
        method=method,
        version=v,
        id=rid,
        params=_params(
            method, proto_names(obj.get("params")) if v == V10 else obj.get("params"), v
        ),
        wire_method=name,
        notification="id" not in obj,
    )


def decode_request(body: Any, version: str | None) -> A2ARequest:
    """A JSON-RPC request to an A2A server, for the ``A2A-Version`` header ``version``.

    ``body`` is the parsed JSON or its raw bytes/str. Errors are :class:`A2AError`
    subclasses carrying the JSON-RPC code to answer with and, when the request's
    ``id`` could be read, that id as ``request_id``.
    """
    obj = parse_json(body)
    if isinstance(obj, list):
        raise InvalidRequestError("batch requests are not supported by A2A")
    if not isinstance(obj, dict):
        raise InvalidRequestError("a JSON-RPC request must be an object")
    try:
        return _decode_request(obj, version)
    except A2AError as e:
        rid = obj.get("id")
        if isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool)):
            e.request_id = rid
        raise


def _config_to_wire(c: SendConfig) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if c.accepted_output_modes is not None:
        out["acceptedOutputModes"] = c.accepted_output_modes
    if c.history_length is not None:
        out["historyLength"] = c.history_length
    if c.blocking is not None:
        out["blocking"] = c.blocking
    if c.return_immediately is not None:
        out["returnImmediately"] = c.return_immediately
    return {**out, **(c.extra or {})}


def _optional(out: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """``out`` plus the ``fields`` that are set (camelCase names given as keywords)."""
    out.update({k: v for k, v in fields.items() if v is not None})
    return out


def params_to_wire(params: Params, version: A2AVersion) -> dict[str, Any] | None:
    """A request's ``params`` in ``version``'s JSON."""
    if params is None or isinstance(params, dict):
        return params
    extra = params.extra or {}
    if isinstance(params, SendParams):
        out = _optional(
            {"message": message_to_wire(params.message, version)},
            configuration=None
            if params.configuration is None
            else _config_to_wire(params.configuration),
            metadata=params.metadata,
            tenant=params.tenant,
        )
    elif isinstance(params, TaskRef):
        out = _optional(
            {"id": params.id},
            historyLength=params.history_length,
            metadata=params.metadata,
            tenant=params.tenant,
        )
    else:
        out = _optional(
            {},
            contextId=params.context_id,
            status=None if params.status is None else state_to_wire(params.status, version),
            pageSize=params.page_size,
            pageToken=params.page_token,
            historyLength=params.history_length,
            statusTimestampAfter=params.status_timestamp_after,
            includeArtifacts=params.include_artifacts,
            tenant=params.tenant,
        )
    return {**out, **extra}


def encode_request(request: A2ARequest) -> dict[str, Any]:
    """The JSON-RPC request object for ``request`` in ``request.version``."""
    v = request.version
    table = METHODS_V10 if v == V10 else METHODS_V03
    name = request.wire_method if table.get(request.wire_method) is request.method else None
    name = name or wire_method(request.method, v)
    if name is None:
        raise UnsupportedOperationError(f"{request.method.value} does not exist in A2A {v}")
    out: dict[str, Any] = {"jsonrpc": "2.0"}
    if not request.notification:
        out["id"] = request.id
    out["method"] = name
    params = params_to_wire(request.params, v)
    if params is not None:
        out["params"] = params
    return out
