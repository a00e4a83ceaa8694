"""The A2A edge's push notification config methods, in 1.0 and 0.3 shapes.

=====================================  ==========================================
1.0 / 0.3                              params → result
=====================================  ==========================================
CreateTaskPushNotificationConfig /     ``{taskId, id?, url, token?, authentication?}``
``tasks/pushNotificationConfig/set``   (0.3: ``{taskId, pushNotificationConfig}``)
                                       → the stored config (an id made if none)
GetTaskPushNotificationConfig /        ``{taskId, id}`` (0.3: ``{id: task,
``.../get``                            pushNotificationConfigId?}``) → the config
ListTaskPushNotificationConfigs /      ``{taskId}`` (0.3: ``{id}``) → ``{configs,
``.../list``                           nextPageToken}`` (0.3: the list)
DeleteTaskPushNotificationConfig /     ``{taskId, id}`` (0.3: ``{id,
``.../delete``                         pushNotificationConfigId}``) → ``{}`` (0.3 null)
=====================================  ==========================================

The task must be the agent's (-32001 otherwise); a URL the gateway will not POST
to is -32602 naming why; without push notifications (off, or no JetStream) every
method is -32003. Notifications go out in the version the config was made in.
"""

from __future__ import annotations

from typing import Any

from actorbus.codecs.a2a import (
    V10,
    InvalidParamsError,
    Method,
    PushNotificationNotSupportedError,
    rpc_result,
)
from actorbus.codecs.a2a.types import A2ARequest
from actorbus.codecs.errors import ValidationFailedError
from actorbus.services.gateway.agents import Agent
from actorbus.services.gateway.core import GatewayCore
from actorbus.services.gateway.push import PushConfig, Pusher, check_push_url, config_fields


def config_to_wire(config: PushConfig, version: str) -> dict[str, Any]:
    inner: dict[str, Any] = {"id": config.id, "url": config.url}
    if config.token:
        inner["token"] = config.token
    if config.auth_scheme:
        auth: dict[str, Any] = {"credentials": config.auth_credentials or ""}
        if version == V10:
            auth["scheme"] = config.auth_scheme
        else:
            auth["schemes"] = [config.auth_scheme]
        inner["authentication"] = auth
    if version == V10:
        return {"taskId": config.task_id, **inner}
    return {"taskId": config.task_id, "pushNotificationConfig": inner}


def pusher_of(core: GatewayCore) -> Pusher:
    if core.pusher is None:
        raise PushNotificationNotSupportedError("this gateway sends no push notifications")
    return core.pusher


async def checked_config(core: GatewayCore, raw: Any, task_id: str, version: str) -> PushConfig:
    """The config ``raw`` describes, for ``task_id``, with a URL the gateway may use."""
    pusher = pusher_of(core)
    try:
        config = PushConfig(task_id=task_id, version=version, **config_fields(raw))
        await check_push_url(config.url, pusher.urls)
    except ValidationFailedError as e:
        raise InvalidParamsError(str(e)) from None
    return config


def _string(params: dict[str, Any], *names: str) -> str | None:
    for name in names:
        value = params.get(name)
        if isinstance(value, str) and value:
            return value
    return None


async def push_method(core: GatewayCore, req: A2ARequest, agent: Agent) -> dict[str, Any]:
    """Answer one push notification config method (a JSON-RPC response)."""
    pusher = pusher_of(core)
    params = req.params if isinstance(req.params, dict) else {}
    v = req.version
    # the task: 1.0, and 0.3's set, name it taskId; 0.3's get/list/delete name it id
    if v == V10 or req.method is Method.CREATE_PUSH_CONFIG:
        task_id = _string(params, "taskId")
    else:
        task_id = _string(params, "id")
    if task_id is None:
        raise InvalidParamsError("the params must name the task (`taskId`)")
    await core.get(task_id, agent.name)  # the agent's task, else -32001
    if req.method is Method.CREATE_PUSH_CONFIG:
        try:
            config = await pusher.configs.put(await checked_config(core, params, task_id, v))
        except ValidationFailedError as e:
            raise InvalidParamsError(str(e)) from None
        return rpc_result(req.id, config_to_wire(config, v))
    configs = await pusher.configs.list(task_id)
    if req.method is Method.LIST_PUSH_CONFIGS:
        listed = [config_to_wire(c, v) for c in configs]
        page = {"configs": listed, "nextPageToken": ""} if v == V10 else listed
        return rpc_result(req.id, page)
    config_id = _string(params, "id") if v == V10 else _string(params, "pushNotificationConfigId")
    if config_id is None and v != V10 and req.method is Method.GET_PUSH_CONFIG and configs:
        config_id = configs[0].id  # 0.3: the task's config when none is named
    found = next((c for c in configs if c.id == config_id), None)
    if found is None:
        raise InvalidParamsError(f"task {task_id} has no push notification config {config_id!r}")
    if req.method is Method.GET_PUSH_CONFIG:
        return rpc_result(req.id, config_to_wire(found, v))
    await pusher.configs.delete(task_id, found.id)
    return rpc_result(req.id, {} if v == V10 else None)
