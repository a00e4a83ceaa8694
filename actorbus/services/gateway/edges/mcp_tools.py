"""Agents as MCP tools: the catalog, argument checking and results (protocol-neutral part
of the MCP edge, :mod:`.mcp`).

Every agent (actor type) of the registry is a tool; an agent with several intents
(handlers) is one tool per intent. The input schema of a tool is the JSON schema
the registry holds for the intent's message model; untyped handlers get a schema
by the intent's name:

============  ==========================================================  =========
intent        inputSchema                                                 content
============  ==========================================================  =========
a model       the model's JSON schema                                     the arguments
``text``      ``{"text": string}`` (required)                             the string
``dict``      ``{"type": "object"}``                                      the arguments
``bytes``     ``{"data": base64 string}`` (required)                      the bytes
other         ``{"type": "object"}`` (``{"text": s}`` alone means ``s``)  the arguments
============  ==========================================================  =========

Tool names: the agent's name for a single-intent agent, else ``{agent}.{intent}``
(characters outside ``[A-Za-z0-9_.-]`` become ``_``, SEP-986). The reply becomes
``content`` (text parts as text, a JSON value as its JSON text, bytes as an
embedded blob, a URL as a resource link) and a JSON object reply is also the
``structuredContent``. A handler that declares a model as its reply (``-> Sum``)
gives its tool an ``outputSchema``: the model's JSON schema, which that
``structuredContent`` then fits.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

import jsonschema
from jsonschema.exceptions import SchemaError

from actorbus.actors.messages import INTENT_BYTES, INTENT_DICT, INTENT_TEXT
from actorbus.codecs.tasks import Part, Task, TaskState
from actorbus.services.gateway.agents import Agent

_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_.-]")
MAX_NAME: Final = 128

TEXT_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {"text": {"type": "string", "description": "the message for the agent"}},
    "required": ["text"],
    "additionalProperties": False,
}
BYTES_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "data": {
            "type": "string",
            "contentEncoding": "base64",
            "description": "the message for the agent, base64",
        }
    },
    "required": ["data"],
    "additionalProperties": False,
}
OBJECT_SCHEMA: Final[dict[str, Any]] = {"type": "object"}
ANY_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": 'a JSON object; {"text": "..."} alone sends the text',
    "properties": {"text": {"type": "string"}},
}


class BadArguments(ValueError):
    """The arguments of a tool call do not fit its input schema."""


@dataclass(frozen=True)
class Tool:
    """One MCP tool: an agent (actor type) and the intent it is asked with."""

    name: str
    agent: Agent
    intent: str
    schema: dict[str, Any] | None  # the registry's JSON schema of the intent's model, if typed
    reply: dict[str, Any] | None = None  # the schema of the reply, if the handler declares one

    @property
    def input_schema(self) -> dict[str, Any]:
        if self.schema is not None:
            out = dict(self.schema)
            out["type"] = "object"  # MCP requires an object root; models are objects anyway
            return out
        if self.intent == INTENT_TEXT:
            return dict(TEXT_SCHEMA)
        if self.intent == INTENT_BYTES:
            return dict(BYTES_SCHEMA)
        if self.intent == INTENT_DICT:
            return dict(OBJECT_SCHEMA)
        return dict(ANY_SCHEMA)

    def describe(self) -> dict[str, Any]:
        """The tool as ``tools/list`` lists it."""
        agent = self.agent
        skills = [
            str(s.get("name") or s.get("id")) for s in agent.skills if s.get("name") or s.get("id")
        ]
        text = (agent.description or f"actorbus agent {agent.name}").rstrip(".")
        if len(agent.intents) > 1:
            text += f" (message: {self.intent})"
        doing = agent.described.get(self.intent, "").rstrip(".")
        if doing and doing != text:
            text += f": {doing}"
        if skills:
            text += f". Skills: {', '.join(skills)}"
        title = agent.name if len(agent.intents) <= 1 else f"{agent.name}: {self.intent}"
        out: dict[str, Any] = {
            "name": self.name,
            "title": title,
            "description": text,
            "inputSchema": self.input_schema,
        }
        if self.reply is not None and self.reply.get("type", "object") == "object":
            out["outputSchema"] = {**self.reply, "type": "object"}
        meta: dict[str, Any] = {
            "agent": agent.name,
            "intent": self.intent,
            "address": agent.address,
        }
        if agent.tags:
            meta["tags"] = list(agent.tags)
        if agent.skills:
            meta["skills"] = [dict(s) for s in agent.skills]
        out["_meta"] = {"io.actorbus/agent": meta}
        return out

    def content(self, arguments: dict[str, Any]) -> Any:
        """The message for the actor, checked against the input schema.

        Raises :class:`BadArguments`.
        """
        check(self.input_schema, arguments)
        if self.schema is not None or self.intent == INTENT_DICT:
            return arguments
        if self.intent == INTENT_TEXT:
            return arguments["text"]
        if self.intent == INTENT_BYTES:
            try:
                return base64.b64decode(arguments["data"], validate=True)
            except (binascii.Error, ValueError):
                raise BadArguments("`data` is not base64") from None
        if set(arguments) == {"text"}:
            return arguments["text"]
        return arguments


def tool_name(agent: str, intent: str | None) -> str:
    raw = agent if intent is None else f"{agent}.{intent}"
    return _UNSAFE.sub("_", raw)[:MAX_NAME] or "_"


def tools_of(agents: list[Agent]) -> list[Tool]:
    """The tools of ``agents``, in name order (one per agent, or per intent)."""
    tools: dict[str, Tool] = {}
    for agent in agents:
        intents = {k: v for k, v in agent.intents.items() if not k.startswith("$")}
        if not intents:  # nothing announced: text, which the actor may take or refuse
            intents = {INTENT_TEXT: None}
        for intent, schema in sorted(intents.items()):
            name = tool_name(agent.name, intent if len(intents) > 1 else None)
            if name in tools:  # two names sanitized alike: the first keeps it
                continue
            typed = schema if isinstance(schema, dict) else None
            reply = agent.replies.get(intent)
            tools[name] = Tool(name=name, agent=agent, intent=intent, schema=typed, reply=reply)
    return [tools[k] for k in sorted(tools)]


@lru_cache(maxsize=256)
def _validator(schema_json: str) -> jsonschema.protocols.Validator | None:
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError:
        return None  # an odd schema from the registry: the actor judges the arguments
    validator: jsonschema.protocols.Validator = cls(schema)
    return validator


def check(schema: dict[str, Any], arguments: Any) -> None:
    """Raise :class:`BadArguments` naming the first place ``arguments`` breaks ``schema``."""
    if not isinstance(arguments, dict):
        raise BadArguments("`arguments` must be a JSON object")
    validator = _validator(json.dumps(schema, sort_keys=True))
    if validator is None:
        return
    error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    if error is not None:
        where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        raise BadArguments(f"arguments{where}: {error.message}")


# -- results ------------------------------------------------------------------------


def content_blocks(parts: list[Part], uri: str) -> tuple[list[dict[str, Any]], Any]:
    """MCP content blocks for A2A parts, and the structured content (a JSON object
    reply), if any."""
    blocks: list[dict[str, Any]] = []
    structured: Any = None
    data_parts = [p for p in parts if p.kind == "data"]
    if len(data_parts) == 1 and len(parts) == 1 and isinstance(data_parts[0].value, dict):
        structured = data_parts[0].value
    for i, p in enumerate(parts):
        if p.kind == "text":
            blocks.append({"type": "text", "text": str(p.value)})
        elif p.kind == "data":
            blocks.append({"type": "text", "text": json.dumps(p.value, ensure_ascii=False)})
        elif p.kind == "raw":
            raw = p.value if isinstance(p.value, bytes) else str(p.value).encode()
            blob = base64.b64encode(raw).decode("ascii")
            mime = p.media_type or "application/octet-stream"
            if mime.startswith("image/"):
                blocks.append({"type": "image", "data": blob, "mimeType": mime})
            else:
                resource = {"uri": f"{uri}/{i}", "mimeType": mime, "blob": blob}
                blocks.append({"type": "resource", "resource": resource})
        else:  # url
            link: dict[str, Any] = {
                "type": "resource_link",
                "uri": str(p.value),
                "name": p.filename or str(p.value),
            }
            if p.media_type:
                link["mimeType"] = p.media_type
            blocks.append(link)
    return blocks, structured


def bad_arguments(tool: str, err: Exception) -> dict[str, Any]:
    """The result of a call whose arguments the tool's schema refuses: an error
    the model reads and can correct (SEP-1303), not a JSON-RPC error."""
    text = f"Invalid arguments for tool {tool}: {err}"
    return {"content": [{"type": "text", "text": text}], "isError": True}


def task_result(task: Task) -> dict[str, Any]:
    """The ``tools/call`` result for a settled task: its reply, or its failure as
    ``isError``; a task waiting for input answers the actor's question (``_meta``
    holds the task id to continue it with)."""
    state = task.status.state
    uri = f"actorbus://tasks/{task.id}"
    facts: dict[str, Any] = {"id": task.id, "contextId": task.context_id, "state": state.value}
    meta = {"io.actorbus/task": facts}
    if state is TaskState.COMPLETED:
        parts = [p for a in task.artifacts or () for p in a.parts]
        blocks, structured = content_blocks(parts, uri)
        out: dict[str, Any] = {"content": blocks, "isError": False, "_meta": meta}
        if structured is not None:
            out["structuredContent"] = structured
        return out
    message = task.status.message
    parts = list(message.parts) if message is not None else []
    blocks, _ = content_blocks(parts, uri)
    if not state.terminal and not state.interrupted:  # its run was stopped with the gateway
        blocks = [{"type": "text", "text": "E_STOPPED: the gateway stopped while the task ran"}]
    elif not blocks:
        blocks = [{"type": "text", "text": f"the task ended {state.value}"}]
    if state.interrupted:
        return {"content": blocks, "isError": False, "_meta": meta}
    error = ((task.metadata or {}).get("gateway") or {}).get("error")
    if isinstance(error, dict):
        facts["error"] = error
    return {"content": blocks, "isError": True, "_meta": meta}
