"""The persisted feed: thread messages (legacy list and keyset pages), run messages and events, token usage."""

from __future__ import annotations

from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from core.drf import SQL_INT_MAX
from runs import selectors
from runs.api.common import owned_run_sync
from runs.feedback_selectors import answer_feedback
from threads.api_common import owned_thread


class CursorSerializer(serializers.Serializer):
    limit = serializers.IntegerField(min_value=1, max_value=200, default=50)
    before_seq = serializers.IntegerField(min_value=0, max_value=SQL_INT_MAX, required=False)
    after_seq = serializers.IntegerField(min_value=0, max_value=SQL_INT_MAX, required=False)

    def validate(self, attrs):
        if "before_seq" in attrs and "after_seq" in attrs:
            raise serializers.ValidationError("give before_seq or after_seq, not both")
        return attrs


def _query(serializer_class, request) -> dict:
    serializer = serializer_class(data=request.query_params.dict())
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class ThreadMessagesView(APIView):
    """GET /threads/{id}/messages: message events across runs, ascending by seq; ``feedback`` on each run's last answer."""

    def get(self, request, thread_id: str):
        thread = owned_thread(request, thread_id)
        query = _query(CursorSerializer, request)
        rows, _ = selectors.thread_messages(
            thread_id=thread.thread_id,
            limit=query["limit"],
            before_seq=query.get("before_seq"),
            after_seq=query.get("after_seq"),
        )
        # DeerFlow's feed: the caller's verdict rides on each run's last answer.
        verdicts = answer_feedback(thread_id=thread.thread_id, events=rows, owner=request.user)
        return Response(
            [
                {**selectors.event_payload(r), "feedback": verdicts[r.seq]}
                if r.seq in verdicts
                else selectors.event_payload(r)
                for r in rows
            ]
        )


class ThreadMessagesPageView(APIView):
    """GET /threads/{id}/messages/page: keyset pages backwards by seq."""

    def get(self, request, thread_id: str):
        thread = owned_thread(request, thread_id)
        if "after_seq" in request.query_params:
            raise ValidationError({"after_seq": "after_seq is not supported by this backward-only endpoint"})
        query = _query(CursorSerializer, request)
        rows, has_more = selectors.thread_messages(
            thread_id=thread.thread_id, limit=query["limit"], before_seq=query.get("before_seq"), after_seq=None
        )
        return Response(
            {
                "data": [selectors.event_payload(r) for r in rows],
                "has_more": has_more,
                "next_before_seq": rows[0].seq if rows and has_more else None,
            }
        )


class RunMessagesView(APIView):
    """GET /threads/{id}/runs/{run_id}/messages."""

    def get(self, request, thread_id: str, run_id: str):
        _, run = owned_run_sync(request, thread_id, run_id)
        query = _query(CursorSerializer, request)
        rows, has_more = selectors.run_messages(
            run=run, limit=query["limit"], before_seq=query.get("before_seq"), after_seq=query.get("after_seq")
        )
        return Response({"data": [selectors.event_payload(r) for r in rows], "has_more": has_more})


class RunEventsView(APIView):
    """GET /threads/{id}/runs/{run_id}/events?event_types=a,b&limit&after_seq."""

    class QuerySerializer(serializers.Serializer):
        event_types = serializers.CharField(required=False)
        limit = serializers.IntegerField(min_value=1, max_value=2000, default=500)
        after_seq = serializers.IntegerField(min_value=0, max_value=SQL_INT_MAX, required=False)

    def get(self, request, thread_id: str, run_id: str):
        _, run = owned_run_sync(request, thread_id, run_id)
        query = _query(self.QuerySerializer, request)
        types = [t.strip() for t in query.get("event_types", "").split(",") if t.strip()] or None
        rows = selectors.run_events(run=run, event_types=types, limit=query["limit"], after_seq=query.get("after_seq"))
        return Response([selectors.event_payload(r) for r in rows])


class ThreadTokenUsageView(APIView):
    """GET /threads/{id}/token-usage?include_active=false."""

    def get(self, request, thread_id: str):
        thread = owned_thread(request, thread_id)
        raw = request.query_params.get("include_active", "false").lower()
        if raw not in {"true", "false", "1", "0"}:
            raise ValidationError({"include_active": "must be true or false"})
        usage = selectors.thread_token_usage(thread_id=thread.thread_id, include_active=raw in {"true", "1"})
        return Response({**usage, "context_usage": selectors.thread_context_usage(thread=thread)})
