"""Regenerate-prepare, edit-regenerate-prepare and branch routes."""

from __future__ import annotations

from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.drf import StrictCharField, validated_body
from runs.services.branching import branch_create, regenerate_prepare
from runs.services.edit_replay import edit_regenerate_prepare
from threads.api_common import owned_thread


class RegeneratePrepareView(APIView):
    """POST /threads/{id}/runs/regenerate/prepare: what to post to regenerate the latest answer."""

    class InputSerializer(serializers.Serializer):
        message_id = StrictCharField(min_length=1)

    def post(self, request, thread_id: str):
        thread = owned_thread(request, thread_id)
        data = validated_body(self.InputSerializer, request)
        return Response(regenerate_prepare(thread=thread, message_id=data["message_id"]))


class EditRegeneratePrepareView(APIView):
    """POST /threads/{id}/runs/edit-regenerate/prepare: what to post to rerun the latest turn with new text."""

    class InputSerializer(serializers.Serializer):
        human_message_id = StrictCharField(min_length=1)
        replacement_text = StrictCharField(min_length=1, trim_whitespace=False)

    def post(self, request, thread_id: str):
        thread = owned_thread(request, thread_id)
        data = validated_body(self.InputSerializer, request)
        prepared = edit_regenerate_prepare(
            thread=thread, human_message_id=data["human_message_id"], replacement_text=data["replacement_text"]
        )
        return Response(prepared)


class BranchCreateView(APIView):
    """POST /threads/{id}/branches: a new thread holding the conversation up to an answer."""

    class InputSerializer(serializers.Serializer):
        message_id = StrictCharField(min_length=1)
        message_ids = serializers.ListField(child=StrictCharField(min_length=1), required=False, default=list)
        title = StrictCharField(required=False, allow_null=True, max_length=256)

    def post(self, request, thread_id: str):
        thread = owned_thread(request, thread_id)
        data = validated_body(self.InputSerializer, request)
        result = branch_create(
            thread=thread, message_id=data["message_id"], message_ids_=data["message_ids"], title=data.get("title")
        )
        return Response(result)
