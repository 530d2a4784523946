"""What exactly a server serves, beyond its plugin's name: `session.created` keeps `session.model` (the
plugin's name, the string OpenAI clients read) and adds `session.model_identity`; `/healthz` names it; a
benchmark's records keep it (docs/protocol.md, `session.created`)."""

from __future__ import annotations

import httpx

from duplexkit.client import DuplexClient
from duplexkit.models import load_model
from duplexkit.server import EmbeddedServer, ServerConfig
from tests.server.conftest import connect


async def _served(reply: str) -> tuple[dict, dict, str | None]:  # type: ignore[type-arg]
    plugin = load_model("scripted", {"reply": reply})
    async with EmbeddedServer(plugin, ServerConfig(max_sessions=2)) as server:
        client = await connect(server.url)
        created = await client.until("session.created")
        await client.ws.close()
        async with httpx.AsyncClient() as http:
            health = (await http.get(f"{server.http_url}/healthz")).json()
        async with DuplexClient(server.url) as duplex:
            await duplex.configure(timeout_s=5)
            recorded = duplex.server_model_identity
    return created["session"], health, recorded


async def test_session_created_and_healthz_name_the_model_served_not_only_the_plugin() -> None:
    one, health_one, recorded_one = await _served("One reply.")
    two, health_two, _ = await _served("Another reply.")
    assert one["model"] == two["model"] == health_one["model"] == "scripted"  # what OpenAI clients read
    assert one["model_identity"]["id"] != two["model_identity"]["id"]  # two scripts, two models
    assert health_one["model_identity"] == one["model_identity"]
    assert health_two["model_identity"] == two["model_identity"]
    assert recorded_one == one["model_identity"]["id"]
