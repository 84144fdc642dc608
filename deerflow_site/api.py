"""Health and info routes."""

from __future__ import annotations

from functools import cache
from importlib.metadata import version

from django.db import connection
from django.http import JsonResponse
from django.views import defaults
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from checkpoints.selectors import checkpoint_info
from console.error_pages import page_not_found


class OkView(APIView):
    """Liveness probe used by the SDK's own integration suite; ``?check_db=1`` pings the DB."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    def get(self, request):
        if request.query_params.get("check_db") in {"1", "true", "True"}:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
        return Response({"ok": True})


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
