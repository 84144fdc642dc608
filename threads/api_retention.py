"""Retention routes: ``POST /threads/prune`` (LangGraph Platform) and ``GET /threads/{id}/storage``."""

from __future__ import annotations

from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from checkpoints.storage import thread_storage_get
from threads.api_common import ThreadIdField, owned_thread
from threads.retention import PRUNE_STRATEGIES, threads_prune


class ThreadPruneView(APIView):
    """POST /threads/prune: delete the caller's threads, or keep what they may still need."""

    class InputSerializer(serializers.Serializer):
        thread_ids = serializers.ListField(child=ThreadIdField(), allow_empty=True, max_length=1000)
        strategy = serializers.ChoiceField(choices=PRUNE_STRATEGIES, default="delete")
        dry_run = serializers.BooleanField(default=False)

    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        body = threads_prune(
            owner=request.user, thread_ids=data["thread_ids"], strategy=data["strategy"], dry_run=data["dry_run"]
        )
        return Response(body)


class ThreadStorageView(APIView):
    """GET /threads/{thread_id}/storage: rows and bytes per table and channel, head mode, snapshots."""

    def get(self, request, thread_id: str):
        thread = owned_thread(request, thread_id)
        return Response(thread_storage_get(thread_id=thread.thread_id))
