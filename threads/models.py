"""Thread metadata: the queryable side of a conversation whose state is in checkpoints."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class ThreadStatus(models.TextChoices):
    IDLE = "idle"
    BUSY = "busy"
    INTERRUPTED = "interrupted"
    ERROR = "error"


# The run vocabulary lives here, below ``runs``, because a thread's own facts
# depend on it: a thread is busy while one of its runs is unfinished, and its
# TTL sweep, retention and delete all ask that. ``runs.models`` uses it for
# the ``Run.status`` field.
class RunStatus(models.TextChoices):
    # Waiting behind the thread's active run (multitask_strategy=enqueue).
    # Outside the one-active-run index, shown to clients as "pending".
    QUEUED = "queued"
    PENDING = "pending"
    RUNNING = "running"
    SUCCESS = "success"
    ERROR = "error"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"


ACTIVE_STATUSES = (RunStatus.PENDING, RunStatus.RUNNING)
UNFINISHED_STATUSES = (RunStatus.QUEUED, *ACTIVE_STATUSES)


class TTLStrategy(models.TextChoices):
    """What the sweep does to a thread whose TTL ran out (the LangGraph Platform's two strategies)."""

    DELETE = "delete"
    KEEP_LATEST = "keep_latest"


class ThreadMeta(models.Model):
    """One thread: owner, graph, title, status and client metadata.

    The state itself lives in LangGraph checkpoints keyed by ``thread_id`` in
    the same database; ``display_name`` mirrors the checkpoint ``title``.
    """

    thread_id = models.CharField(max_length=64, primary_key=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="threads")
    # The graph whose schema reads this thread's state (a registered graph id).
    assistant_id = models.CharField(max_length=128, default="lead_agent")
    display_name = models.CharField(max_length=256, blank=True, default="")
    status = models.CharField(max_length=20, choices=ThreadStatus.choices, default=ThreadStatus.IDLE)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    state_updated_at = models.DateTimeField(null=True, blank=True)
    # Set while a delete removes the checkpoints (outside the ORM transaction):
    # admission refuses the thread from then on (threads.services.thread_delete).
    deleting_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Set while a state update writes its checkpoint (outside the ORM
    # transaction): admission refuses the thread meanwhile, so no run starts
    # from the head the update is replacing (threads.services.thread_state_update).
    state_updating_at = models.DateTimeField(null=True, blank=True, editable=False)
    # The thread's TTL (``threads.ttl``): the sweep applies ``ttl_strategy`` once
    # ``expires_at`` passes; runs and state updates restart the clock
    # (expires_at = now + ttl). NULL ttl: the thread never expires.
    ttl_strategy = models.CharField(max_length=16, choices=TTLStrategy.choices, blank=True, default="")
    ttl = models.DurationField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, editable=False)
    # A cache of the head's small top-level values for search's ``values``
    # filter (``threads.search``); current while ``values_mirror_version``
    # equals ``updated_at``, which every run and state update moves.
    values_mirror = models.JSONField(null=True, blank=True, editable=False)
    values_mirror_version = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        verbose_name = "thread"
        ordering = ("-updated_at",)
        # Deleting checkpoints cannot be undone: the console's Apply needs more than "change".
        permissions = [("apply_retention", "Can apply checkpoint retention to threads")]
        indexes = [
            models.Index(fields=["owner", "-updated_at"], name="ix_threads_owner_updated"),
            models.Index(fields=["owner", "status"], name="ix_threads_owner_status"),
            models.Index(fields=["assistant_id"], name="ix_threads_assistant"),
            # The sweep's "what expired" scan; partial: most threads have no TTL.
            models.Index(fields=["expires_at"], name="ix_threads_expires", condition=Q(expires_at__isnull=False)),
        ]

    def __str__(self) -> str:
        return self.display_name or self.thread_id
