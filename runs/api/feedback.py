"""DeerFlow's run feedback routes: a person's thumbs up or down on a run, listed, tallied and withdrawn."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.drf import StrictCharField, validated_body
from runs import feedback_selectors as selectors
from runs.api.common import owned_run_sync
from runs.services.feedback import feedback_create, feedback_delete, feedback_delete_own, feedback_upsert

RATING_PROBLEM = "rating must be +1 or -1"


class RatingField(serializers.IntegerField):
    """+1 or -1 exactly: no ``true``, ``"1"`` or ``1.0`` read as a thumbs up."""

    default_error_messages = {"invalid": RATING_PROBLEM}

    def to_internal_value(self, data):
        if type(data) is not int or data not in (1, -1):
            self.fail("invalid")
        return data


class SuccessSerializer(serializers.Serializer):
    success = serializers.BooleanField()


class FeedbackStatsSerializer(serializers.Serializer):
    run_id = serializers.CharField()
    total = serializers.IntegerField()
    positive = serializers.IntegerField()
    negative = serializers.IntegerField()


class FeedbackSerializer(serializers.Serializer):
    """One verdict, as every route answers it (documentation only: answers are built by the selector)."""

    feedback_id = serializers.CharField()
    run_id = serializers.CharField()
    thread_id = serializers.CharField()
    user_id = serializers.CharField()
    message_id = serializers.CharField(allow_null=True)
    rating = serializers.IntegerField()
    comment = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()


def _answer(feedback) -> Response:
    return Response(selectors.feedback_payload(feedback))


def _listed(feedback) -> Response:
    return Response([selectors.feedback_payload(f) for f in feedback])


class RunFeedbackView(APIView):
    """``/threads/{id}/runs/{run_id}/feedback``: PUT sets the caller's verdict, POST adds it, GET lists, DELETE withdraws."""

    class InputSerializer(serializers.Serializer):
        rating = RatingField()
        comment = StrictCharField(required=False, allow_null=True, allow_blank=True, trim_whitespace=False)
        message_id = StrictCharField(required=False, allow_null=True, max_length=64)

    class UpsertSerializer(serializers.Serializer):
        rating = RatingField()
        comment = StrictCharField(required=False, allow_null=True, allow_blank=True, trim_whitespace=False)

    @extend_schema(responses=FeedbackSerializer(many=True))
    def get(self, request, thread_id: str, run_id: str):
        _, run = owned_run_sync(request, thread_id, run_id)
        return _listed(selectors.run_feedback_list(run=run))

    @extend_schema(request=UpsertSerializer, responses=FeedbackSerializer)
    def put(self, request, thread_id: str, run_id: str):
        _, run = owned_run_sync(request, thread_id, run_id)
        data = validated_body(self.UpsertSerializer, request)
        return _answer(feedback_upsert(run=run, owner=request.user, rating=data["rating"], comment=data.get("comment")))

    @extend_schema(request=InputSerializer, responses=FeedbackSerializer)
    def post(self, request, thread_id: str, run_id: str):
        _, run = owned_run_sync(request, thread_id, run_id)
        data = validated_body(self.InputSerializer, request)
        feedback = feedback_create(
            run=run,
            owner=request.user,
            rating=data["rating"],
            comment=data.get("comment"),
            message_id=data.get("message_id"),
        )
        return _answer(feedback)

    @extend_schema(request=None, responses=SuccessSerializer)
    def delete(self, request, thread_id: str, run_id: str):
        _, run = owned_run_sync(request, thread_id, run_id)
        feedback_delete_own(run=run, owner=request.user)
        return Response({"success": True})


class RunFeedbackStatsView(APIView):
    """GET /threads/{id}/runs/{run_id}/feedback/stats: ``{run_id, total, positive, negative}``."""

    @extend_schema(responses=FeedbackStatsSerializer)
    def get(self, request, thread_id: str, run_id: str):
        _, run = owned_run_sync(request, thread_id, run_id)
        return Response(selectors.run_feedback_stats(run=run))


class RunFeedbackDetailView(APIView):
    """DELETE /threads/{id}/runs/{run_id}/feedback/{feedback_id}: withdraw one of the caller's verdicts."""

    @extend_schema(request=None, responses=SuccessSerializer, operation_id="threads_runs_feedback_destroy_one")
    def delete(self, request, thread_id: str, run_id: str, feedback_id: str):
        _, run = owned_run_sync(request, thread_id, run_id)
        feedback_delete(run=run, owner=request.user, feedback_id=feedback_id)
        return Response({"success": True})


class RunFeedbackByRunView(APIView):
    """GET /runs/{run_id}/feedback: a run's verdicts by its id alone (its thread must be the caller's)."""

    @extend_schema(responses=FeedbackSerializer(many=True))
    def get(self, request, run_id: str):
        run = selectors.run_in_scope(run_id=run_id, user=request.user)
        return _listed(selectors.run_feedback_list(run=run))
