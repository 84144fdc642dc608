"""Thread metadata: the queryable side of a conversation whose state is in checkpoints."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from core.encrypted_fields import EncryptedJSONField


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
    metadata = EncryptedJSONField(default=dict, blank=True, sealed_as=("thread", "metadata"))
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
    values_mirror = EncryptedJSONField(null=True, blank=True, editable=False, sealed_as=("thread", "values"))
    values_mirror_version = models.DateTimeField(null=True, blank=True, editable=False)
    # The project the thread is filed in (``threads.projects``); mirrored into
    # ``metadata["deerflow_project_id"]``, where DeerFlow's frontend reads it.
    project = models.ForeignKey(
        "threads.Project", null=True, blank=True, on_delete=models.SET_NULL, related_name="threads", editable=False
    )

    class Meta:
        verbose_name = "thread"
        ordering = ("-updated_at",)
        # Deleting checkpoints cannot be undone: the console's Apply needs more than "change".
        # Export hands over every message, run input and abandoned branch: more than viewing a page.
        permissions = [
            ("apply_retention", "Can apply checkpoint retention to threads"),
            ("export_threadmeta", "Can export threads (messages, run inputs, branches)"),
        ]
        indexes = [
            models.Index(fields=["owner", "-updated_at"], name="ix_threads_owner_updated"),
            models.Index(fields=["owner", "status"], name="ix_threads_owner_status"),
            models.Index(fields=["assistant_id"], name="ix_threads_assistant"),
            # The sweep's "what expired" scan; partial: most threads have no TTL.
            models.Index(fields=["expires_at"], name="ix_threads_expires", condition=Q(expires_at__isnull=False)),
        ]

    def __str__(self) -> str:
        return self.display_name or self.thread_id


class Project(models.Model):
    """A user's folder of threads (DeerFlow's projects): each thread is in at most one.

    An archived project keeps its threads but takes no new ones.
    """

    project_id = models.CharField(max_length=64, primary_key=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="projects")
    name = models.CharField(max_length=256)
    archived_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("-updated_at",)
        indexes = [models.Index(fields=["owner", "-updated_at"], name="ix_projects_owner_updated")]

    def __str__(self) -> str:
        return self.name or self.project_id


class ThreadStreamEvent(models.Model):
    """One event of a thread's protocol-v2 log: ``seq`` is thread-global, ``event_id`` stable.

    Every run of the thread appends here (lifecycle, values, messages, …), and
    so does a state update, so ``/threads/{id}/stream/events`` replays
    ``seq > since`` from any process, after the run ended or the server
    restarted. ``run_id`` is a plain column, not a foreign key: the log is the
    thread's, and deleting a finished run keeps its history. The table keeps
    the name it had when the model was part of ``runs``.
    """

    thread = models.ForeignKey(ThreadMeta, on_delete=models.CASCADE, related_name="stream_events")
    seq = models.PositiveBigIntegerField()
    event_id = models.CharField(max_length=255)
    run_id = models.CharField(max_length=64, blank=True, default="")
    method = models.CharField(max_length=32)
    namespace = models.JSONField(default=list, blank=True)
    data = EncryptedJSONField(null=True, blank=True, sealed_as=("thread", "stream"))
    # Milliseconds since the epoch, as the wire carries it.
    timestamp = models.BigIntegerField()

    class Meta:
        db_table = "runs_threadstreamevent"
        ordering = ("thread", "seq")
        constraints = [
            models.UniqueConstraint(fields=["thread", "seq"], name="uq_stream_events_thread_seq"),
        ]

    def __str__(self) -> str:
        return f"{self.thread_id}#{self.seq} {self.method}"

    def envelope(self) -> dict:
        """Return the event as the wire carries it (SSE ``data:`` and WebSocket frames)."""
        return stream_envelope(self.event_id, self.seq, self.method, self.namespace, self.timestamp, self.data)


def stream_envelope(event_id: str, seq: int, method: str, namespace: list, timestamp: int, data: Any) -> dict:
    """Return a thread-log event as the wire carries it, from its columns."""
    return {
        "type": "event",
        "event_id": event_id,
        "seq": seq,
        "method": method,
        "params": {"namespace": namespace, "timestamp": timestamp, "data": data},
    }
