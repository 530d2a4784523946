"""The session's function calls: which are pending, answered or stale, and what an output may answer.

The model opens a call (`FunctionCall`, or a client's `function_call` item); the client answers it with a
`function_call_output` item. A barge-in (any interrupt) retires the calls still pending: the user moved on,
so an output that arrives for one later joins the conversation but is never answered. The ledger runs no
tools and keeps no time; audio keeps flowing past it (it is not consulted on an append).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from duplexkit.protocol.client_events import is_json_object
from duplexkit.protocol.errors import ErrorCode, ProtocolError

CallState = Literal["pending", "answered", "stale"]


@dataclass(frozen=True, slots=True)
class FunctionOutput:
    """A call's output as the model receives it (on the next unit it steps): the call and its result."""

    call_id: str
    name: str
    arguments: str
    output: str


@dataclass(slots=True)
class _Call:
    name: str
    arguments: str
    state: CallState = "pending"


class ToolLedger:
    """Every call of one session, by `call_id`."""

    def __init__(self) -> None:
        self._calls: dict[str, _Call] = {}

    @property
    def pending(self) -> list[str]:
        """The calls that still wait for their output, in the order they were made."""
        return [call_id for call_id, call in self._calls.items() if call.state == "pending"]

    def state(self, call_id: str) -> CallState | None:
        call = self._calls.get(call_id)
        return None if call is None else call.state

    def open(self, call_id: str, name: str, arguments: str) -> None:
        """A new call; `duplicate_function_call` for a `call_id` already used in this session."""
        if call_id in self._calls:
            raise ProtocolError(
                ErrorCode.DUPLICATE_FUNCTION_CALL, f"call_id {call_id!r} is already used", param="call_id"
            )
        self._calls[call_id] = _Call(name, arguments)

    def answer(self, call_id: str, output: str) -> FunctionOutput | None:
        """Accept the output of a pending call; `None` for a call a barge-in retired (the output joins the
        conversation, as OpenAI takes any call's output, but the model is never asked to answer it).
        Refused with a code: `unknown_function_call` (no such call), `duplicate_function_call_output`
        (answered already)."""
        call = self._calls.get(call_id)
        if call is None:
            raise ProtocolError(
                ErrorCode.UNKNOWN_FUNCTION_CALL, f"no function call {call_id!r}", param="item.call_id"
            )
        if call.state == "answered":
            raise ProtocolError(
                ErrorCode.DUPLICATE_FUNCTION_CALL_OUTPUT,
                f"function call {call_id!r} has its output already",
                param="item.call_id",
            )
        if call.state == "stale":
            return None
        call.state = "answered"
        return FunctionOutput(call_id, call.name, call.arguments, output)

    def retire(self) -> list[str]:
        """A barge-in: every pending call becomes stale; their ids."""
        retired = self.pending
        for call_id in retired:
            self._calls[call_id].state = "stale"
        return retired


def check_arguments(arguments: str) -> None:
    """`invalid_function_call` unless `arguments` is a JSON-encoded object (OpenAI's contract)."""
    if not is_json_object(arguments):
        raise ProtocolError(
            ErrorCode.INVALID_FUNCTION_CALL,
            "a function call's arguments must be a JSON-encoded object",
            param="item.arguments",
        )
