"""DeerFlow's context routes: a thread's goal (GET/PUT/DELETE) and manual compaction."""

from __future__ import annotations

from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.drf import StrictCharField
from threads import compaction, goal
from threads.api_common import owned_thread, validate_thread_id


class ThreadGoalView(APIView):
    """GET/PUT/DELETE /threads/{id}/goal: ``{"goal": GoalState or null}``.

    PUT creates the thread when the id is free, as DeerFlow's does; another
    user's thread is 404 to every method, as on every thread route.
    """

    class InputSerializer(serializers.Serializer):
        objective = StrictCharField(min_length=1, max_length=goal.MAX_OBJECTIVE_CHARS)
        max_continuations = serializers.IntegerField(
            min_value=0, max_value=goal.MAX_CONTINUATIONS, default=goal.MAX_CONTINUATIONS
        )

    def get(self, request, thread_id: str):
        return Response({"goal": goal.thread_goal(owned_thread(request, thread_id))})

    def put(self, request, thread_id: str):
        serializer = self.InputSerializer(data=request.data or {})
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        state = goal.thread_goal_set(
            owner=request.user,
            thread_id=validate_thread_id(thread_id),
            objective=data["objective"],
            max_continuations=data["max_continuations"],
        )
        return Response({"goal": state})

    def delete(self, request, thread_id: str):
        goal.thread_goal_clear(thread=owned_thread(request, thread_id))
        return Response({"goal": None})


class ContextSizeSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["messages", "tokens", "fraction"])
    value = serializers.FloatField(min_value=0)

    def validate(self, attrs):
        if attrs["type"] == "fraction" and attrs["value"] > 1:
            raise serializers.ValidationError({"value": "a fraction is at most 1"})
        return attrs


class ThreadCompactView(APIView):
    """POST /threads/{id}/compact: fold older messages into a summary (DeerFlow's ``ThreadCompactResponse``)."""

    class InputSerializer(serializers.Serializer):
        force = serializers.BooleanField(default=True)
        keep = ContextSizeSerializer(required=False, allow_null=True)
        # Accepted as DeerFlow's clients send it: it picks a DeerFlow custom agent's model, which no graph here has.
        agent_name = StrictCharField(required=False, allow_null=True, max_length=128)
        model_name = StrictCharField(required=False, allow_null=True, max_length=128)

    def post(self, request, thread_id: str):
        thread = owned_thread(request, thread_id)
        serializer = self.InputSerializer(data=request.data or {})
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        keep = compaction.Keep(data["keep"]["type"], data["keep"]["value"]) if data.get("keep") else None
        result = compaction.thread_compact(
            thread=thread, keep=keep, force=data["force"], model_name=data.get("model_name")
        )
        return Response(result)
