"""ASGI entry point: Django (DRF, admin, SSE views) and WebSocket consumers on one router."""

from __future__ import annotations

import logging
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deerflow_site.settings")

import django  # noqa: E402

django.setup(set_prefix=False)

from core.sync_threads import PooledThreadASGIHandler  # noqa: E402

# Django's handler, each request on a reused thread that keeps its connection.
django_asgi_app = PooledThreadASGIHandler()

from django.conf import settings  # noqa: E402

from deerflow_site.databases import MEMORY_SQLITE_NAME, prepare_memory_database  # noqa: E402

if settings.DATABASES["default"]["NAME"] == MEMORY_SQLITE_NAME:
    prepare_memory_database()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.urls import re_path  # noqa: E402

from deerflow_site import lifecycle, server_logs  # noqa: E402
from deerflow_site.body_limit import limit_request_bodies  # noqa: E402
from deerflow_site.consumers import UnknownPathConsumer  # noqa: E402
from deerflow_site.custom_app import CustomApp, load_app  # noqa: E402
from deerflow_site.ws_auth import websocket_auth_stack  # noqa: E402
from runs.routing import websocket_urlpatterns  # noqa: E402

server_logs.redact_query_keys()

# HTTP: Django (DRF views, SSE streaming views, the admin; its static files are
# served from the apps themselves), behind the request body limit, a 4xx's
# detail put on its access line. WebSocket: Channels consumers.
router = ProtocolTypeRouter(
    {
        "http": server_logs.log_request_headers(
            server_logs.log_client_error_details(limit_request_bodies(ASGIStaticFilesHandler(django_asgi_app))),
            settings.DEERFLOW.get("LOGGING_HEADERS"),
        ),
        # Last: any other path is refused cleanly instead of raising in the router.
        "websocket": websocket_auth_stack(
            URLRouter([*websocket_urlpatterns, re_path(r"", UnknownPathConsumer.as_asgi())])
        ),
    }
)


# langgraph.json's http.app: the project's routes, served before ours (deerflow_site.custom_app).
custom_app = (
    CustomApp(
        load_app(spec, folders=settings.DEERFLOW["GRAPH_DEPENDENCIES"], env=settings.DEERFLOW["GRAPH_ENV"]),
        spec,
        authenticate=settings.DEERFLOW["HTTP_APP_AUTH"],
    )
    if (spec := settings.DEERFLOW.get("HTTP_APP"))
    else None
)


async def lifespan(receive, send) -> None:
    """Start the runtime before the server listens and close it after the last request.

    A start-up that fails is reported as such: the server exits saying why
    instead of answering every request with the same error.
    """
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            try:
                await lifecycle.startup()
                if custom_app is not None:
                    await custom_app.startup()
            except Exception as exc:
                logging.getLogger(__name__).exception("the runtime did not start")
                await send({"type": "lifespan.startup.failed", "message": f"{type(exc).__name__}: {exc}"})
                return
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            if custom_app is not None:
                await custom_app.shutdown()
            await lifecycle.shutdown()
            await send({"type": "lifespan.shutdown.complete"})
            return


# langgraph.json's http.mount_prefix: "/prefix/threads" is "/api/threads"; the http.app's routes too.
MOUNT_PREFIX = settings.DEERFLOW.get("MOUNT_PREFIX")


def unprefixed(scope: dict, prefix: str) -> dict:
    """Return ``scope`` with the mount prefix taken off its path (unchanged outside the prefix)."""
    path = scope.get("path", "")
    if not (path == prefix or path.startswith(f"{prefix}/")):
        return scope
    rest = path[len(prefix) :] or "/"
    if custom_app is None or not custom_app.serves({**scope, "path": rest}):
        rest = "/api" + rest
    return {**scope, "path": rest, "raw_path": rest.encode(), "root_path": scope.get("root_path", "")}


async def ours(scope, receive, send):
    """Our routes: Django for HTTP, Channels for WebSocket."""
    # Once per process, before the first request or WebSocket: handlers find the
    # runtime built (a server that sends no lifespan events gets it here).
    await lifecycle.startup()
    await router(scope, receive, send)


# The project's own middleware runs on our routes too, as on the Platform (http.middleware_order).
served = (
    custom_app.around(ours, auth_first=settings.DEERFLOW["HTTP_MIDDLEWARE_ORDER"] == "auth_first")
    if custom_app is not None
    else ours
)


async def application(scope, receive, send):
    """Route HTTP and WebSocket; answer ASGI lifespan."""
    if scope["type"] == "lifespan":
        return await lifespan(receive, send)
    if MOUNT_PREFIX and scope["type"] in ("http", "websocket"):
        scope = unprefixed(scope, MOUNT_PREFIX)
    if custom_app is not None and scope["type"] in ("http", "websocket") and custom_app.serves(scope):
        return await custom_app(scope, receive, send)
    await served(scope, receive, send)
