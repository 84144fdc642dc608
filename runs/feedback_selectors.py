"""Reads of run feedback: a run's verdicts, their tally, and the caller's verdict on each answer of a feed."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Max, Q

from core.access import scope_of
from core.errors import NotFound
from runs.models import Feedback, Run, RunEvent

# The event that carries a run's answer: DeerFlow's feed hangs the verdict on the run's last one.
ANSWER_EVENT = "llm.ai.response"


def feedback_payload(feedback: Feedback) -> dict[str, Any]:
    """Return DeerFlow's feedback row shape (``user_id``: the author's username here)."""
    return {
        "feedback_id": feedback.feedback_id,
        "run_id": feedback.run_id,
        "thread_id": feedback.thread_id,
        "user_id": feedback.owner.get_username(),
        "message_id": feedback.message_id or None,
        "rating": feedback.rating,
        "comment": feedback.comment or None,
        "created_at": feedback.created_at.isoformat(),
    }


def run_feedback_list(*, run: Run) -> list[Feedback]:
    """Return every verdict on the run, oldest first."""
    return list(Feedback.objects.filter(run=run).select_related("owner").order_by("created_at", "feedback_id"))


def run_feedback_stats(*, run: Run) -> dict[str, Any]:
    """Return DeerFlow's tally: ``{run_id, total, positive, negative}``, one query."""
    counts = Feedback.objects.filter(run=run).aggregate(
        total=Count("pk"), positive=Count("pk", filter=Q(rating=1)), negative=Count("pk", filter=Q(rating=-1))
    )
    return {"run_id": run.run_id, **counts}


def run_in_scope(*, run_id: str, user) -> Run:
    """Return a run by id alone if its thread is in the caller's scope; else 404, as for a missing one."""
    run = Run.objects.filter(scope_of(user).q(prefix="thread__"), pk=run_id).first()
    if run is None:
        raise NotFound(f"Run {run_id} not found")
    return run


def answer_feedback(*, thread_id: str, events: list[RunEvent], owner) -> dict[int, dict[str, Any] | None]:
    """Return, by seq, the caller's verdict on each run whose last answer is among ``events`` (None: no verdict).

    The last answer of a run is its whole feed's, not the page's: a page that
    ends mid-run marks nothing of that run. Two queries, whatever the page size.
    """
    run_ids = {e.run_id for e in events if e.event_type == ANSWER_EVENT}
    if not run_ids:
        return {}
    last = dict(
        RunEvent.objects.filter(thread_id=thread_id, run_id__in=run_ids, event_type=ANSWER_EVENT, category="message")
        .order_by()
        .values_list("run_id")
        .annotate(seq=Max("seq"))
    )
    verdicts = {
        f.run_id: {"feedback_id": f.feedback_id, "rating": f.rating, "comment": f.comment or None}
        for f in Feedback.objects.filter(run_id__in=run_ids, owner=owner)
    }
    return {e.seq: verdicts.get(e.run_id) for e in events if last.get(e.run_id) == e.seq}
