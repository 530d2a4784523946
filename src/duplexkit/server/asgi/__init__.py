"""The ASGI edge: the server's routes as a Starlette app, run by uvicorn (`duplexkit serve --edge asgi`),
Ray Serve's replicas (`server.ray_serve`) or any ASGI host that embeds it."""

from duplexkit.server.asgi.app import asgi_app

__all__ = ["asgi_app"]
