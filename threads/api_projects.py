"""DeerFlow's projects: list, create and archive them; move a thread into or out of one."""

from __future__ import annotations

from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.drf import StrictCharField
from threads import projects
from threads.api_common import owned_thread, thread_payload


class ProjectListView(APIView):
    """GET /projects: the caller's projects; POST: create one."""

    class InputSerializer(serializers.Serializer):
        name = StrictCharField(min_length=1, max_length=256)

    def get(self, request):
        return Response([projects.project_payload(p) for p in projects.project_list(owner=request.user)])

    def post(self, request):
        serializer = self.InputSerializer(data=request.data or {})
        serializer.is_valid(raise_exception=True)
        project = projects.project_create(owner=request.user, name=serializer.validated_data["name"])
        return Response(projects.project_payload(project))


class ProjectDetailView(APIView):
    """PATCH /projects/{id}: rename, archive (``archived: true``) or restore it."""

    class InputSerializer(serializers.Serializer):
        name = StrictCharField(required=False, min_length=1, max_length=256)
        archived = serializers.BooleanField(required=False)

    def patch(self, request, project_id: str):
        project = projects.project_get(owner=request.user, project_id=project_id)
        serializer = self.InputSerializer(data=request.data or {})
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        project = projects.project_update(project=project, name=data.get("name"), archived=data.get("archived"))
        return Response(projects.project_payload(project))


class ThreadMoveView(APIView):
    """POST /threads/{id}/move: ``{"project_id": id}`` files the thread in a project, ``null`` in none."""

    class InputSerializer(serializers.Serializer):
        project_id = StrictCharField(allow_null=True, max_length=64)

    def post(self, request, thread_id: str):
        thread = owned_thread(request, thread_id)
        serializer = self.InputSerializer(data=request.data or {})
        serializer.is_valid(raise_exception=True)
        moved = projects.thread_move(thread=thread, project_id=serializer.validated_data["project_id"])
        return Response(thread_payload(moved, with_values=False))
