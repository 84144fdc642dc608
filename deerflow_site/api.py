"""Health and info routes."""

from __future__ import annotations

from functools import cache, partial
from importlib.metadata import version
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.views import defaults
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from checkpoints.selectors import checkpoint_info
from console.error_pages import page_not_found

# How long /ok?check_db=1 waits for a Redis to answer.
REDIS_PING_SECONDS = 2.0


def redis_urls() -> dict[str, str]:
    """The Redis each configured use reaches, by use (none: every layer is in memory)."""
    config = settings.DEERFLOW_CONFIG
    uses = {
        "stream_bridge": config.stream_bridge.type == "redis" and config.redis.resolved_url(),
        "channel_layer": config.channel_layer.type == "redis" and config.redis.resolved_url(),
        "checkpoint_cache": config.database.checkpoint_cache.type == "redis"
        and config.database.checkpoint_cache.resolved_redis_url(),
    }
    return {use: url for use, url in uses.items() if url}


def _ping_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def _ping_redis(url: str) -> None:
    import redis  # installed with channels-redis; asked for only where a layer uses Redis

    client = redis.Redis.from_url(url, socket_timeout=REDIS_PING_SECONDS, socket_connect_timeout=REDIS_PING_SECONDS)
    try:
        client.ping()
    finally:
        client.close()


def services_check() -> dict[str, str]:
    """``ok``, or ``error: <why>``, for the database and each Redis a layer uses (credentials never shown)."""
    checks: dict[str, Any] = {"database": _ping_database}
    urls = list(dict.fromkeys(redis_urls().values()))
    for url in urls:
        name = "redis" if len(urls) == 1 else f"redis {urlsplit(url).hostname}:{urlsplit(url).port}"
        checks[name] = partial(_ping_redis, url)
    answers = {}
    for name, check in checks.items():
        try:
            check()
            answers[name] = "ok"
        except Exception as exc:  # a dependency's failure is the answer, never a 500
            answers[name] = f"error: {type(exc).__name__}"
    return answers


class OkView(APIView):
    """Liveness probe used by the SDK's own integration suite; ``?check_db=1`` also checks each dependency.

    With it the answer carries ``services`` (the database, and Redis where a
    layer uses it: ``ok`` or ``error: <kind>``) and is a 503 when one fails,
    so a readiness probe can take a process out of rotation.
    """

    authentication_classes: list = []
    permission_classes = [AllowAny]

    def get(self, request):
        if request.query_params.get("check_db") not in {"1", "true", "True"}:
            return Response({"ok": True})
        services = services_check()
        healthy = all(answer == "ok" for answer in services.values())
        return Response({"ok": healthy, "services": services}, status=200 if healthy else 503)


@cache
def _versions() -> dict[str, str]:
    # Read once: each lookup parses the installed package's metadata file.
    return {"version": version("deerflow-site"), "langgraph_py_version": version("langgraph")}


class InfoView(APIView):
    """Versions, feature flags and the checkpoint configuration this process runs with."""

    def get(self, request):
        return Response(
            {
                **_versions(),
                "flags": {"assistants": True, "crons": True, "langsmith": False, "store": True},
                "host": {"kind": "self-hosted", "project_id": None, "revision_id": None},
                "checkpoints": checkpoint_info(),
            }
        )


def not_found(request, exception=None):
    """404 for a path no route matches: ``{"detail": ...}`` under /api/ (what API clients parse), HTML elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": f"No route {request.path}"}, status=404)
    return page_not_found(request, exception)


def server_error(request):
    """500 for an unhandled error: ``{"detail": ...}`` under /api/, HTML elsewhere; never a traceback."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Internal server error"}, status=500)
    return defaults.server_error(request)
