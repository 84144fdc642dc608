"""Answers to a thread's interrupts: each is answered by one run, whichever client or process asks first.

A client answers what it read pending in the checkpoint; two clients read
the same pending interrupt. Admission records the answering run under the
thread lock, and a unique pair (thread, interrupt) refuses the second
answer, so two server processes serialise exactly as two requests to one.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import IntegrityError, transaction

from core.errors import Conflict
from runs.models import InterruptAnswer, Run, RunStatus

# An answer whose run ended so may never have resumed its interrupt (the
# checkpoint still shows it pending): it no longer holds the interrupt.
RELEASED = (RunStatus.ERROR, RunStatus.TIMEOUT, RunStatus.INTERRUPTED)


class InterruptAnswered(Conflict):
    """Another answer to the interrupt was admitted first, or it was already consumed."""

    def __init__(self, interrupt_id: str) -> None:
        super().__init__(f"Unknown or already-consumed interrupt: {interrupt_id}")
        self.interrupt_id = interrupt_id


def interrupt_answers_record(*, run: Run, interrupt_ids: Sequence[str]) -> None:
    """Record ``run`` as the answer to each interrupt; raise ``InterruptAnswered`` if one has an answer.

    Call in the transaction that admitted ``run`` (which holds the thread
    lock, so a concurrent answer waits and then sees this one); raising
    rolls the admission back with it.
    """
    held = InterruptAnswer.objects.filter(thread_id=run.thread_id, interrupt_id__in=interrupt_ids)
    held.filter(run__status__in=RELEASED).delete()
    if (taken := held.values_list("interrupt_id", flat=True).first()) is not None:
        raise InterruptAnswered(taken)
    rows = [InterruptAnswer(thread_id=run.thread_id, interrupt_id=i, run=run) for i in interrupt_ids]
    try:
        with transaction.atomic():  # without the lock (a caller that forgot it), the index still decides
            InterruptAnswer.objects.bulk_create(rows)
    except IntegrityError:
        raise InterruptAnswered(interrupt_ids[0]) from None


def interrupt_answered(*, thread_id: str, interrupt_ids: Sequence[str]) -> bool:
    """Whether any of ``interrupt_ids`` has an answer on record (consumed, or being consumed)."""
    return InterruptAnswer.objects.filter(thread_id=thread_id, interrupt_id__in=interrupt_ids).exists()
