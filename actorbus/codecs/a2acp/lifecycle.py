"""The A2ACP collaboration lifecycle (handshake, contract, routing, termination) as
a pure state machine; the codec registration."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from actorbus.codecs.a2acp.checker import (
    HANDSHAKE_TIMEOUT_S,
    INTENT_ACCEPT_HANDSHAKE,
    INTENT_INITIATE_HANDSHAKE,
    INTENT_TERMINATE,
    PROTOCOL,
    ROUTING_TIMEOUT_S,
)
from actorbus.codecs.a2acp.codec import (
    A2acpMessage,
    decode,
    encode,
    error_from,
    error_to,
    parse_message,
)
from actorbus.codecs.common import (
    ENVELOPE_FIELDS_BUT_HINT,
    format_timestamp as format_timestamp,
)
from actorbus.codecs.edge import Codec, register
from actorbus.codecs.errors import (
    ProtocolError,
)

# -- the lifecycle ---------------------------------------------------------------------------------


class A2acpState(StrEnum):
    IDLE = "idle"
    HANDSHAKE_REQUESTED = "handshake_requested"
    ACCEPTANCE_REQUESTED = "acceptance_requested"
    ACCEPTED = "accepted"
    CONTRACTED = "contracted"
    CLOSED = "closed"
    REJECTED = "rejected"


_TERMINAL = frozenset({A2acpState.CLOSED, A2acpState.REJECTED})
_PRE_CONTRACT = frozenset(
    {A2acpState.HANDSHAKE_REQUESTED, A2acpState.ACCEPTANCE_REQUESTED, A2acpState.ACCEPTED}
)


class A2acpSession:
    """One collaboration's lifecycle: handshake -> contract -> routed messages.

    Pure: feed it every message of the collaboration, in order, with
    :meth:`observe`; it returns the new state or raises ProtocolError naming the
    state and the message that does not fit. It fits every seat: a source agent
    sees ``initiate_handshake`` then the broker's contract response; a target
    sees ``accept_handshake``, answers ``{"accepted": ...}`` and is told the
    contract; the broker sees all of it. Once contracted, every request,
    response and event must carry the contract's ``contract_id`` in its
    payload; ``terminate_collaboration`` closes; an error before the contract
    rejects the collaboration, one after it does not end it.
    """

    def __init__(self) -> None:
        self.state = A2acpState.IDLE
        self.contract_id: str | None = None
        self.collaboration_id: str | None = None
        self.contract: dict[str, Any] | None = None

    @property
    def timeout_s(self) -> float | None:
        """How long the current step may take by the spec (None once ended)."""
        if self.state in _TERMINAL:
            return None
        return ROUTING_TIMEOUT_S if self.state is A2acpState.CONTRACTED else HANDSHAKE_TIMEOUT_S

    def observe(self, message: Mapping[str, Any] | A2acpMessage) -> A2acpState:
        msg = message if isinstance(message, A2acpMessage) else parse_message(message)
        if self.state in _TERMINAL:
            raise self._illegal(msg, "the collaboration has ended")
        step = getattr(self, "_in_" + self.state.value)
        new: A2acpState = step(msg, msg.payload or {})
        self.state = new
        return new

    def _illegal(self, msg: A2acpMessage, why: str) -> ProtocolError:
        return ProtocolError(
            f"A2ACP session in state {self.state.value!r} cannot take a "
            f"{msg.message_type!r} message with intent {msg.intent!r}: {why}"
        )

    def _in_idle(self, msg: A2acpMessage, payload: dict[str, Any]) -> A2acpState:
        if msg.message_type == "request" and msg.intent == INTENT_INITIATE_HANDSHAKE:
            for key in ("target_agent_id", "requested_intent"):
                if not isinstance(payload.get(key), str):
                    raise self._illegal(msg, f"the handshake payload needs a string {key!r}")
            return A2acpState.HANDSHAKE_REQUESTED
        if msg.message_type == "request" and msg.intent == INTENT_ACCEPT_HANDSHAKE:
            return A2acpState.ACCEPTANCE_REQUESTED
        raise self._illegal(msg, "a collaboration starts with a handshake")

    def _in_handshake_requested(self, msg: A2acpMessage, payload: dict[str, Any]) -> A2acpState:
        if msg.message_type == "request" and msg.intent == INTENT_ACCEPT_HANDSHAKE:
            return A2acpState.ACCEPTANCE_REQUESTED
        return self._contract_or_reject(msg, payload)

    def _in_acceptance_requested(self, msg: A2acpMessage, payload: dict[str, Any]) -> A2acpState:
        if msg.message_type == "error":
            return A2acpState.REJECTED
        accepted = payload.get("accepted")
        if msg.message_type != "response" or not isinstance(accepted, bool):
            raise self._illegal(msg, 'the target must answer {"accepted": true|false}')
        return A2acpState.ACCEPTED if accepted else A2acpState.REJECTED

    def _in_accepted(self, msg: A2acpMessage, payload: dict[str, Any]) -> A2acpState:
        return self._contract_or_reject(msg, payload)

    def _contract_or_reject(self, msg: A2acpMessage, payload: dict[str, Any]) -> A2acpState:
        if msg.message_type == "error":
            return A2acpState.REJECTED
        contract = payload.get("contract")
        collaboration = payload.get("collaboration_id")
        if msg.message_type == "request" or not isinstance(contract, dict):
            raise self._illegal(msg, "expected the broker's contract (collaboration_id, contract)")
        contract_id = contract.get("contract_id", payload.get("contract_id"))
        if not isinstance(collaboration, str) or not isinstance(contract_id, str):
            raise self._illegal(msg, "the contract needs a collaboration_id and a contract_id")
        self.contract, self.contract_id, self.collaboration_id = (
            contract,
            contract_id,
            collaboration,
        )
        return A2acpState.CONTRACTED

    def _in_contracted(self, msg: A2acpMessage, payload: dict[str, Any]) -> A2acpState:
        if msg.message_type == "error":
            return A2acpState.CONTRACTED
        if payload.get("contract_id") != self.contract_id:
            raise self._illegal(msg, f"routed messages must carry contract_id {self.contract_id!r}")
        if msg.message_type == "request" and msg.intent == INTENT_TERMINATE:
            return A2acpState.CLOSED
        return A2acpState.CONTRACTED


CODEC = register(
    Codec(PROTOCOL, encode, decode, error_to, error_from, carries=ENVELOPE_FIELDS_BUT_HINT)
)
