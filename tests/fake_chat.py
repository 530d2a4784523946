"""A fake OpenAI-compatible chat-completions endpoint on a real socket, for the cascade's `openai` responder.

Written from the chat-completions streaming contract (`POST /v1/chat/completions` with `stream: true`
answers `text/event-stream`: `data: <chat.completion.chunk>` lines, then `data: [DONE]`; a function call
streams as `delta.tool_calls[{index, id, type, function: {name, arguments}}]` pieces, the first naming the
function, later ones adding argument fragments, and the choice ends with `finish_reason: "tool_calls"`).

Its rule, so a test can script a tool round trip: when the request offers `tools` and its last message
is the user's, it calls `call` (the arguments in several fragments); otherwise it answers `answer` in a
few content deltas (a `{tool}` in it is replaced by the last `tool` message's content). Every request
body is kept in `requests`.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHUNK_FIELDS = {"object": "chat.completion.chunk", "model": "fake"}


class FakeChat:
    """Serves on a thread of its own (so one endpoint can outlive a test's event loop); a context
    manager that starts and stops it."""

    def __init__(
        self,
        call: tuple[str, dict[str, Any]] = ("get_weather", {"city": "Paris"}),
        answer: str = "It is {tool} in Paris.",
        delay_s: float = 0.0,
    ) -> None:
        self.call = call
        self.answer = answer
        self.delay_s = delay_s
        """Wait before the first chunk (a slow LLM)."""
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
                if self.path != "/v1/chat/completions":
                    self.send_error(404)
                    return
                fake.requests.append(body)
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                time.sleep(fake.delay_s)
                for chunk in fake._chunks(body):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-chat", daemon=True)

    def __enter__(self) -> FakeChat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _chunks(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        created = int(time.time())
        messages = body["messages"]

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return {"id": "chatcmpl-fake", "created": created, **CHUNK_FIELDS, "choices": [choice]}

        if body.get("tools") and messages[-1]["role"] == "user":
            name, arguments = self.call
            text = json.dumps(arguments)
            cut = len(text) // 2
            first = {"index": 0, "id": f"call_fake_{len(self.requests)}", "type": "function"}
            return [
                chunk(
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [{**first, "function": {"name": name, "arguments": ""}}],
                    }
                ),
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": text[:cut]}}]}),
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": text[cut:]}}]}),
                chunk({}, "tool_calls"),
            ]
        tool = next((m["content"] for m in reversed(messages) if m["role"] == "tool"), "")
        words = self.answer.replace("{tool}", tool).split(" ")
        deltas = [chunk({"role": "assistant", "content": ""})]
        deltas += [chunk({"content": w + (" " if i < len(words) - 1 else "")}) for i, w in enumerate(words)]
        return [*deltas, chunk({}, "stop")]
