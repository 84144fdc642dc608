"""Health and info routes."""

from __future__ import annotations

from importlib.metadata import version

from django.db import connection
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView


class OkView(APIView):
    """Liveness probe used by the SDK's own integration suite; ``?check_db=1`` pings the DB."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    def get(self, request):
        if request.query_params.get("check_db") in {"1", "true", "True"}:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
        return Response({"ok": True})


class InfoView(APIView):
    """Versions, feature flags and the checkpoint configuration this process runs with."""

    def get(self, request):
        from checkpoints.selectors import checkpoint_info

        return Response(
            {
                "version": version("deerflow-site"),
                "langgraph_py_version": version("langgraph"),
                "flags": {"assistants": True, "crons": False, "langsmith": False, "store": True},
                "host": {"kind": "self-hosted", "project_id": None, "revision_id": None},
                "checkpoints": checkpoint_info(),
            }
        )
