"""Writes of run feedback: create, upsert and delete a person's verdict on a run.

One verdict per person per run, kept by the ``uq_feedback_run_owner``
constraint: two requests racing to create both reach the database, and the
loser is answered as if it had come second (409 for a create, an update for
an upsert). A run or thread deleted meanwhile makes the insert fail its
foreign key; that is answered as the missing run it now is.
"""

from __future__ import annotations

import uuid

from django.db import IntegrityError, transaction

from core.errors import Conflict, NotFound
from runs.models import Feedback, Run


def _run_gone(run: Run) -> NotFound:
    return NotFound(f"Run {run.run_id} not found")


def _insert(feedback: Feedback) -> Feedback:
    """Validate and insert ``feedback``; raise IntegrityError when the person's verdict exists (or the run went)."""
    feedback.full_clean(exclude=["run", "thread", "owner"], validate_unique=False)
    with transaction.atomic():
        feedback.save(force_insert=True)
    return feedback


def feedback_create(
    *, run: Run, owner, rating: int, comment: str | None = None, message_id: str | None = None
) -> Feedback:
    """Record ``owner``'s verdict on ``run``; 409 if they already gave one (PUT changes it)."""
    feedback = Feedback(
        feedback_id=uuid.uuid4().hex,
        run=run,
        thread_id=run.thread_id,
        owner=owner,
        rating=rating,
        comment=comment or "",
        message_id=message_id or "",
    )
    try:
        return _insert(feedback)
    except IntegrityError:
        if not Run.objects.filter(pk=run.pk).exists():
            raise _run_gone(run) from None
        raise Conflict(f"Feedback on run {run.run_id} already exists; PUT it to change it.") from None


def feedback_upsert(*, run: Run, owner, rating: int, comment: str | None = None) -> Feedback:
    """Set ``owner``'s verdict on ``run``: a new one, or their existing one's rating and comment."""
    for _ in range(2):  # a create that raced ours and won is updated on the second pass
        with transaction.atomic():
            existing = Feedback.objects.select_for_update().filter(run=run, owner=owner).first()
            if existing is not None:
                existing.rating, existing.comment = rating, comment or ""
                existing.full_clean(exclude=["run", "thread", "owner"], validate_unique=False)
                existing.save(update_fields=["rating", "comment"])
                return existing
        try:
            return _insert(
                Feedback(
                    feedback_id=uuid.uuid4().hex,
                    run=run,
                    thread_id=run.thread_id,
                    owner=owner,
                    rating=rating,
                    comment=comment or "",
                )
            )
        except IntegrityError:
            if not Run.objects.filter(pk=run.pk).exists():
                raise _run_gone(run) from None
    raise Conflict(f"Feedback on run {run.run_id} changed while it was written; try again.")


def feedback_delete_own(*, run: Run, owner) -> None:
    """Delete ``owner``'s verdict on ``run``; 404 when they gave none."""
    deleted, _ = Feedback.objects.filter(run=run, owner=owner).delete()
    if not deleted:
        raise NotFound(f"No feedback of yours on run {run.run_id}")


def feedback_delete(*, run: Run, owner, feedback_id: str) -> None:
    """Delete one of ``owner``'s verdicts on ``run`` by id; another person's, or another run's, is 404."""
    deleted, _ = Feedback.objects.filter(pk=feedback_id, run=run, owner=owner).delete()
    if not deleted:
        raise NotFound(f"Feedback {feedback_id} not found")
