"""Function calls a server asks the client to make: what the client offers (`ToolBox`), how a call is read
off the wire (`ToolCallTracker`, Sans-I/O) and what each call did (`ToolCallRecord`).

The wire contract is OpenAI Realtime's (GA and beta; see `../shared/reference/tools.md` §1), which our own
protocol carries too:

- a call is complete when one of these arrives with its `call_id`, `name` and `arguments`:
  `response.function_call_arguments.done` (GA carries `name`; beta does not, so the name comes from the
  `function_call` item announced before it: `response.output_item.added`, `conversation.item.added` or
  `conversation.item.created`, which carry no arguments yet), `response.output_item.done` or
  `conversation.item.done` with a
  `function_call` item, or a `function_call` item listed in `response.done`'s `output`. vLLM-Omni's duplex
  dialect sends `function_call.done` with the three fields flat. Whichever comes first counts; a `call_id`
  is answered once.
- the answer is `conversation.item.create` with a `function_call_output` item (`call_id`, `output` text);
  once every call of a response is answered and the response is done, one `response.create` asks the
  model to go on (the server does not continue by itself: `ToolCallTracker.continuations`).
- a call whose response ended `cancelled` (a barge-in) is still run (a tool already started cannot be
  taken back) but its output is not sent: the server would refuse it as stale.

Calls are matched to what the client offers by name: a Python callable (sync or async, called with the
arguments as keywords) or a fixed result. A call the client cannot make (no such tool, arguments that are
not a JSON object, a tool that raised) is still answered, with an `{"error": ...}` output naming the
problem, so the model hears why; the record keeps the code.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from duplexkit.client.events import as_str, dig, response_id_of

ToolFunction = Callable[..., Any]
"""A tool: called with the call's arguments as keywords; may be async; its result is sent as the output
(a `str` as is, anything else as JSON)."""

CallStatus = Literal["running", "answered", "cancelled", "failed"]


class ToolsFileError(ValueError):
    """A `--tools` file that cannot be loaded (`code` names the problem)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"[{code}] {message}")
        self.code = code


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call the server asked for, as it arrived."""

    call_id: str
    name: str
    arguments: str
    """The JSON-encoded arguments, as sent."""
    response_id: str | None
    item_id: str | None
    received_at: float
    """The client's monotonic clock at receipt."""
    media_ms: float
    """Where it was heard on the input timeline (`ReceivedEvent.media_ms`)."""


@dataclass(slots=True)
class ToolCallRecord:
    """What became of one call: the output sent (or why none was), and when, on both clocks."""

    call: ToolCall
    status: CallStatus = "running"
    output: str | None = None
    error: str | None = None
    """`unknown_tool`, `bad_arguments` or `tool_raised` when the client could not make the call."""
    started_at: float | None = None
    finished_at: float | None = None
    output_sent_at: float | None = None
    output_media_ms: float | None = None

    def to_json(self, origin: float) -> dict[str, Any]:
        """The record with times in seconds since `origin` (the client's connect, as `events.json` has)
        and on the input timeline (ms, the stream's clock)."""

        def since(at: float | None) -> float | None:
            return None if at is None else round(at - origin, 4)

        return {
            "call_id": self.call.call_id,
            "name": self.call.name,
            "arguments": self.call.arguments,
            "response_id": self.call.response_id,
            "status": self.status,
            "output": self.output,
            "error": self.error,
            "called_media_ms": round(self.call.media_ms, 1),
            "output_media_ms": None if self.output_media_ms is None else round(self.output_media_ms, 1),
            "clock": "media_ms: input timeline (stream clock); *_s: client monotonic since connect",
            "called_s": since(self.call.received_at),
            "started_s": since(self.started_at),
            "finished_s": since(self.finished_at),
            "output_sent_s": since(self.output_sent_at),
        }


def parse_arguments(arguments: str) -> dict[str, Any]:
    """A call's arguments as a dict; `ValueError` when they are not a JSON object (empty means none)."""
    if not arguments.strip():
        return {}
    value = json.loads(arguments)
    if not isinstance(value, dict):
        raise ValueError(f"arguments must be a JSON object, got {type(value).__name__}")
    return value


def output_text(result: Any) -> str:
    """A tool's result as the output string: text as is, anything else as JSON."""
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)


class ToolBox:
    """The tools a client offers: callables and fixed results by name, and their declarations (the flat
    function-tool objects `session.update` carries; a tool without one is declared with an open schema)."""

    def __init__(
        self,
        functions: Mapping[str, ToolFunction] | None = None,
        *,
        fixed: Mapping[str, Any] | None = None,
        definitions: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        self.functions = dict(functions or {})
        self.fixed = dict(fixed or {})
        declared = {str(d.get("name")): dict(d) for d in definitions or ()}
        for name in (*self.functions, *self.fixed):
            declared.setdefault(name, _open_definition(name, self.functions.get(name)))
        self._definitions = declared

    @property
    def names(self) -> list[str]:
        return sorted({*self.functions, *self.fixed})

    def definitions(self) -> list[dict[str, Any]]:
        """The tools as `session.update` declares them (`{"type": "function", "name", "description",
        "parameters"}`)."""
        return [self._definitions[name] for name in self.names]

    async def run(self, name: str, arguments: str) -> tuple[str, str | None]:
        """`(output, error code)` of calling `name` with `arguments`; never raises for the tool's sake."""
        if name in self.fixed:
            return output_text(self.fixed[name]), None
        function = self.functions.get(name)
        if function is None:
            return json.dumps({"error": f"no tool named {name!r}"}), "unknown_tool"
        try:
            kwargs = parse_arguments(arguments)
        except ValueError as exc:
            return json.dumps({"error": f"arguments are not a JSON object: {exc}"}), "bad_arguments"
        try:
            result = function(**kwargs)
            if inspect.isawaitable(result):
                result = await result
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return json.dumps({"error": f"{type(exc).__name__}: {exc}"}), "tool_raised"
        return output_text(result), None


def _open_definition(name: str, function: ToolFunction | None) -> dict[str, Any]:
    """A declaration for a tool given without one: its docstring's first line and its keyword names."""
    doc = (inspect.getdoc(function) or "").strip().splitlines() if function is not None else []
    properties: dict[str, Any] = {}
    required: list[str] = []
    if function is not None:
        for param in inspect.signature(function).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            properties[param.name] = {}
            if param.default is param.empty:
                required.append(param.name)
    return {
        "type": "function",
        "name": name,
        "description": doc[0] if doc else f"the {name} tool",
        "parameters": {"type": "object", "properties": properties, "required": required},
    }


def load_tools_file(path: Path) -> ToolBox:
    """`talk --tools FILE`: a Python module (its `TOOLS`, a dict of name → callable, else its public
    functions; an optional `DEFINITIONS` list declares them) or a JSON object of fixed results
    (name → result, sent as is when text, else as JSON). Raises `ToolsFileError`."""
    if not path.is_file():
        raise ToolsFileError("no_file", f"{path}: no such file")
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ToolsFileError("bad_json", f"{path}: {exc}") from None
        if not isinstance(data, dict) or not data:
            raise ToolsFileError("bad_json", f"{path}: expected a JSON object of tool name → fixed result")
        return ToolBox(fixed=data)
    if path.suffix != ".py":
        raise ToolsFileError("bad_suffix", f"{path}: a tools file is a .py module or a .json of results")
    spec = importlib.util.spec_from_file_location(f"duplexkit_tools_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ToolsFileError("bad_module", f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise ToolsFileError("bad_module", f"{path}: import raised {type(exc).__name__}: {exc}") from None
    functions = getattr(module, "TOOLS", None)
    if functions is None:
        functions = {
            name: value
            for name, value in vars(module).items()
            if inspect.isfunction(value) and value.__module__ == module.__name__ and not name.startswith("_")
        }
    if not isinstance(functions, dict) or not functions or not all(callable(f) for f in functions.values()):
        raise ToolsFileError("no_tools", f"{path}: no TOOLS dict of callables and no public functions")
    definitions = getattr(module, "DEFINITIONS", None)
    return ToolBox(functions, definitions=definitions if isinstance(definitions, list) else None)


_ANNOUNCING = frozenset(
    {"response.output_item.added", "conversation.item.added", "conversation.item.created"}
)
"""Events that announce a `function_call` item as it starts (its name; its arguments still empty)."""
_FINISHING = frozenset({"response.output_item.done", "conversation.item.done"})
"""Events that carry a finished `function_call` item."""


@dataclass
class _Pending:
    """A response's calls: how many are still running, whether it is done and how it ended."""

    running: set[str] = field(default_factory=set)
    answered: int = 0
    done: bool = False
    status: str | None = None
    continued: bool = False


class ToolCallTracker:
    """Reads function calls off the received events and says when a response may be continued. Sans-I/O:
    fed event dicts with their receipt times, it never sends anything itself."""

    def __init__(self) -> None:
        self._names: dict[str, str] = {}
        """call_id or item id → the function name announced for it (beta's `arguments.done` has none)."""
        self._seen: set[str] = set()
        self._responses: dict[str, _Pending] = {}
        self._response_of: dict[str, str | None] = {}
        """call_id → its response (`None` until an event names it: `conversation.item.done` does not)."""
        self._through: dict[str, bool] = {}
        """call_id → whether its output went out, once the client is through with it."""

    def observe(self, data: Mapping[str, Any], received_at: float, media_ms: float) -> list[ToolCall]:
        """The calls this event completes (each `call_id` once)."""
        kind = data.get("type")
        found: list[dict[str, Any]] = []
        if kind in _ANNOUNCING or kind in _FINISHING:
            item = data.get("item")
            if isinstance(item, dict) and item.get("type") == "function_call":
                self._remember(item)
                if kind in _FINISHING:
                    found.append({**item, "response_id": data.get("response_id")})
        elif kind in ("response.function_call_arguments.done", "function_call.done"):  # the latter: vLLM-Omni
            found.append(dict(data))
        elif kind == "response.done":
            response = data.get("response")
            rid = response_id_of(dict(data))
            for item in (response.get("output") if isinstance(response, dict) else None) or []:
                if isinstance(item, dict) and item.get("type") == "function_call":
                    found.append({**item, "response_id": rid})
            if rid is not None:
                pending = self._responses.setdefault(rid, _Pending())
                pending.done = True
                pending.status = as_str(dig(response, "status"))
        calls = []
        for raw in found:
            call = self._complete(raw, received_at, media_ms)
            if call is not None:
                calls.append(call)
        return calls

    def _remember(self, item: Mapping[str, Any]) -> None:
        name = as_str(item.get("name"))
        if name:
            for key in (as_str(item.get("call_id")), as_str(item.get("id"))):
                if key:
                    self._names[key] = name

    def _complete(self, raw: Mapping[str, Any], received_at: float, media_ms: float) -> ToolCall | None:
        call_id = as_str(raw.get("call_id"))
        rid = as_str(raw.get("response_id"))
        if call_id in self._seen:  # a later event may be the first to name the call's response
            if rid is not None and call_id and self._response_of.get(call_id) is None:
                self._attach(call_id, rid)
            return None
        arguments = raw.get("arguments")
        item_id = as_str(raw.get("item_id")) or as_str(raw.get("id"))
        name = as_str(raw.get("name")) or self._names.get(call_id or "") or self._names.get(item_id or "")
        if not call_id or not name or not isinstance(arguments, str):
            return None
        self._seen.add(call_id)
        self._response_of[call_id] = None
        if rid is not None:
            self._attach(call_id, rid)
        return ToolCall(call_id, name, arguments, rid, item_id, received_at, media_ms)

    def _attach(self, call_id: str, rid: str) -> None:
        """`call_id` belongs to response `rid`: running there, or already through with (then counted)."""
        self._response_of[call_id] = rid
        pending = self._responses.setdefault(rid, _Pending())
        if call_id in self._through:
            pending.answered += int(self._through[call_id])
        else:
            pending.running.add(call_id)

    def cancelled(self, call: ToolCall) -> bool:
        """The call's response ended cancelled (or failed): its output would be stale."""
        pending = self._responses.get(self._response_of.get(call.call_id) or "")
        return pending is not None and pending.done and pending.status in ("cancelled", "failed")

    def finished(self, call: ToolCall, *, sent: bool) -> None:
        """The client is through with `call` (`sent`: its output went out)."""
        self._through[call.call_id] = sent
        pending = self._responses.get(self._response_of.get(call.call_id) or "")
        if pending is not None:
            pending.running.discard(call.call_id)
            pending.answered += int(sent)

    def continuations(self) -> list[str]:
        """Responses now ready for the client's `response.create` (each once): done, not cancelled, every
        call answered, at least one output sent."""
        ready = []
        for rid, pending in self._responses.items():
            if (
                pending.done
                and not pending.continued
                and not pending.running
                and pending.answered
                and pending.status not in ("cancelled", "failed")
            ):
                pending.continued = True
                ready.append(rid)
        return ready
