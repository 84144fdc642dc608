"""Runs and their persisted event feed."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from core.encrypted_fields import EncryptedJSONField, EncryptedTextField
from threads.models import RunStatus, ThreadMeta

# The error of a run whose executor is gone: read by selectors (an expired
# lease), written by the lifecycle services; here where both can see them.
ORPHAN_MESSAGE = "Server restarted before this run reached a durable final state."
LOST_MESSAGE = "The run's executor stopped before the run reached a durable final state."


class CancelAction(models.TextChoices):
    INTERRUPT = "interrupt"
    ROLLBACK = "rollback"


class Run(models.Model):
    """One run of a graph on a thread: admission, ownership, outcome and token usage."""

    run_id = models.CharField(max_length=64, primary_key=True)
    thread = models.ForeignKey(ThreadMeta, on_delete=models.CASCADE, related_name="runs")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="runs")
    # The graph the run runs (a registered graph id); the assistant the client
    # named, and its version, are in kwargs (``assistant_id``, ``assistant_version``).
    assistant_id = models.CharField(max_length=128)
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.PENDING)
    multitask_strategy = models.CharField(max_length=20, default="reject")
    metadata = EncryptedJSONField(default=dict, blank=True, sealed_as=("run", "metadata"))
    # The request as executed: input/command, config (secrets redacted), stream options.
    kwargs = EncryptedJSONField(default=dict, blank=True, sealed_as=("run", "kwargs"))
    error = models.TextField(blank=True, default="")
    stop_reason = models.CharField(max_length=50, blank=True, default="")
    # Durable cancel request; the first action wins (see runs.services).
    cancel_action = models.CharField(max_length=20, choices=CancelAction.choices, blank=True, default="")
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    # The person whose request cancelled the run (the first request wins, as
    # for the action); empty when nobody did, or the server did (a shutdown).
    cancelled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )
    # The process executing the run ("host:pid:nonce") and its lease, renewed
    # while the process lives; cross-process cancel and orphan recovery use both.
    # The pre-run head (checkpoints.rollback.RollbackPoint, serialized) once
    # captured: orphan recovery honours a rollback request with it.
    rollback_point = models.JSONField(null=True, blank=True, editable=False)
    worker_id = models.CharField(max_length=128, blank=True, default="")
    # A delayed start (``after_seconds``): no worker claims the run before this time.
    not_before = models.DateTimeField(null=True, blank=True)
    # Where the run's final record is POSTed (``webhook``). Its own column, not
    # in kwargs: a URL often carries a token, and kwargs, events and logs show
    # only its redacted form (``runs.services.webhooks.redacted_url``).
    webhook = models.TextField(blank=True, default="", editable=False)
    # The encryption context of the request that started it: what the run
    # writes, in whichever process, is sealed with it (core.custom_encryption).
    encryption_context = models.JSONField(null=True, blank=True, editable=False)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    model_name = models.CharField(max_length=128, blank=True, default="")
    total_input_tokens = models.PositiveIntegerField(default=0)
    total_output_tokens = models.PositiveIntegerField(default=0)
    total_tokens = models.PositiveIntegerField(default=0)
    llm_call_count = models.PositiveIntegerField(default=0)
    token_usage_by_model = models.JSONField(default=dict, blank=True)
    token_usage_by_caller = models.JSONField(default=dict, blank=True)
    message_count = models.PositiveIntegerField(default=0)
    first_human_message = EncryptedTextField(blank=True, default="", sealed_as=("run", "first_human_message"))
    last_ai_message = EncryptedTextField(blank=True, default="", sealed_as=("run", "last_ai_message"))
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-created_at",)
        constraints = [
            # The cross-process guarantee: at most one pending/running run per
            # thread. Two processes racing to admit cannot both insert.
            models.UniqueConstraint(
                fields=["thread"],
                condition=Q(status__in=["pending", "running"]),
                name="uq_runs_thread_active",
            ),
        ]
        indexes = [
            models.Index(fields=["thread", "status"], name="ix_runs_thread_status"),
            models.Index(fields=["thread", "-created_at"], name="ix_runs_thread_created"),
            models.Index(fields=["owner", "-created_at"], name="ix_runs_owner_created"),
            models.Index(fields=["status", "worker_id"], name="ix_runs_status_worker"),
            # The claim query: pending runs whose delayed start has come.
            models.Index(fields=["status", "not_before"], name="ix_runs_status_not_before"),
        ]

    def __str__(self) -> str:
        return self.run_id


class RunEvent(models.Model):
    """One persisted event of a run's feed; ``seq`` strictly increases per thread."""

    thread = models.ForeignKey(ThreadMeta, on_delete=models.CASCADE, related_name="events")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    event_type = models.CharField(max_length=32)
    category = models.CharField(max_length=16)
    # A string, an object (a serialized message) or null.
    content = EncryptedJSONField(null=True, blank=True, sealed_as=("run", "events"))
    metadata = models.JSONField(default=dict, blank=True)
    seq = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("thread", "seq")
        constraints = [
            models.UniqueConstraint(fields=["thread", "seq"], name="uq_events_thread_seq"),
        ]
        indexes = [
            models.Index(fields=["thread", "category", "seq"], name="ix_events_thread_cat_seq"),
            models.Index(fields=["thread", "run", "seq"], name="ix_events_run"),
        ]

    def __str__(self) -> str:
        return f"{self.thread_id}#{self.seq} {self.event_type}"


class Assistant(models.Model):
    """A graph with saved config, context and metadata, versioned; the run routes accept its id.

    ``owner`` is the user who created it; a system assistant (one per
    registered graph, id ``uuid5(NAMESPACE_GRAPH, graph_id)``) has no owner,
    is visible to every user and changes only with the server's configuration.
    The row holds the version in force; every version is kept in ``AssistantVersion``.
    """

    assistant_id = models.CharField(max_length=64, primary_key=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="assistants"
    )
    graph_id = models.CharField(max_length=128)
    name = models.CharField(max_length=256)
    description = models.TextField(blank=True, default="")
    config = models.JSONField(default=dict, blank=True)
    context = EncryptedJSONField(default=dict, blank=True, sealed_as=("assistant", "context"))
    metadata = EncryptedJSONField(default=dict, blank=True, sealed_as=("assistant", "metadata"))
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("-created_at",)
        indexes = [
            models.Index(fields=["owner", "-created_at"], name="ix_assistants_owner_created"),
            models.Index(fields=["graph_id"], name="ix_assistants_graph"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.assistant_id})"

    @property
    def is_system(self) -> bool:
        return self.owner_id is None


class AssistantVersion(models.Model):
    """One saved version of an assistant: what a run of that version gets."""

    assistant = models.ForeignKey(Assistant, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    graph_id = models.CharField(max_length=128)
    name = models.CharField(max_length=256)
    description = models.TextField(blank=True, default="")
    config = models.JSONField(default=dict, blank=True)
    context = EncryptedJSONField(default=dict, blank=True, sealed_as=("assistant", "context"))
    metadata = EncryptedJSONField(default=dict, blank=True, sealed_as=("assistant", "metadata"))
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("assistant", "-version")
        constraints = [
            models.UniqueConstraint(fields=["assistant", "version"], name="uq_assistant_versions"),
        ]

    def __str__(self) -> str:
        return f"{self.assistant_id} v{self.version}"


class Cron(models.Model):
    """A run on a schedule: on one thread, or on a new thread per firing (stateless).

    ``next_run_date`` is the claim: a worker fires a due cron only by moving
    it forward with a conditional UPDATE (``runs.services.crons``), in the
    same transaction that admits the run.
    """

    cron_id = models.CharField(max_length=64, primary_key=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="crons")
    assistant = models.ForeignKey(Assistant, on_delete=models.CASCADE, related_name="crons")
    # Null for a stateless cron: every firing gets a thread of its own.
    thread = models.ForeignKey(ThreadMeta, null=True, blank=True, on_delete=models.CASCADE, related_name="crons")
    schedule = models.CharField(max_length=256)
    # An IANA zone the schedule is read in; empty: UTC.
    timezone = models.CharField(max_length=64, blank=True, default="")
    end_time = models.DateTimeField(null=True, blank=True)
    enabled = models.BooleanField(default=True)
    # Stateless crons only: delete (default) or keep each firing's thread.
    on_run_completed = models.CharField(max_length=10, blank=True, default="")
    # The validated run request every firing starts (the run routes' body).
    payload = EncryptedJSONField(default=dict, blank=True, sealed_as=("cron", "payload"))
    metadata = EncryptedJSONField(default=dict, blank=True, sealed_as=("cron", "metadata"))
    # The encryption context of the request that created it: its firings seal with it (core.custom_encryption).
    encryption_context = models.JSONField(null=True, blank=True, editable=False)
    next_run_date = models.DateTimeField(null=True, blank=True)
    last_run_date = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("-created_at",)
        indexes = [
            models.Index(fields=["enabled", "next_run_date"], name="ix_crons_due"),
            models.Index(fields=["owner", "-created_at"], name="ix_crons_owner_created"),
        ]

    def __str__(self) -> str:
        return f"{self.cron_id} ({self.schedule})"


class InterruptAnswer(models.Model):
    """The run admitted to answer one of a thread's interrupts: each interrupt is answered once.

    Two clients (or two server processes) answering the same interrupt both
    read it pending in the checkpoint; the unique pair decides which answer
    runs, in the database, whatever process each came through. A row whose
    run ended without success is released when the interrupt is answered
    again (``runs.services.interrupts``).
    """

    thread = models.ForeignKey(ThreadMeta, on_delete=models.CASCADE, related_name="interrupt_answers")
    interrupt_id = models.CharField(max_length=255)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="interrupt_answers")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["thread", "interrupt_id"], name="uq_interrupt_answers_thread_interrupt"),
        ]

    def __str__(self) -> str:
        return f"{self.thread_id}: {self.interrupt_id} -> {self.run_id}"


class Feedback(models.Model):
    """A person's verdict on a run's answer: thumbs up (+1) or down (-1), with an optional comment.

    DeerFlow's ``feedback`` table. One per person per run (DeerFlow's unique
    ``(thread_id, run_id, user_id)``; the run names its thread). It goes
    with its run and thread, as the run's events do: deleting either (or the
    thread's TTL, or a user erase) deletes it. It also goes with its author's
    account: a verdict is the person's own data, and another user's run must
    not keep an account from being deleted.
    """

    feedback_id = models.CharField(max_length=64, primary_key=True)
    # No index of its own: uq_feedback_run_owner leads with the run.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="feedback", db_index=False)
    thread = models.ForeignKey(ThreadMeta, on_delete=models.CASCADE, related_name="feedback")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="feedback")
    rating = models.SmallIntegerField(choices=[(1, "+1"), (-1, "-1")])
    # Empty when not given; answered as null, as DeerFlow's nullable columns are.
    comment = models.TextField(blank=True, default="")
    message_id = models.CharField(max_length=64, blank=True, default="")
    # Not auto_now_add: an import keeps DeerFlow's time.
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ("created_at", "feedback_id")
        constraints = [
            # The upsert's key, and the index of every per-run read (list, stats, the feed's lookup).
            models.UniqueConstraint(fields=["run", "owner"], name="uq_feedback_run_owner"),
            models.CheckConstraint(condition=Q(rating__in=[1, -1]), name="ck_feedback_rating"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id} {self.rating:+d} by {self.owner_id}"


class McpSession(models.Model):
    """An MCP client's session (``Mcp-Session-Id``), which the Platform's stateless /mcp does not keep.

    Issued by ``initialize`` to its caller alone: another user's id, an
    ended one (DELETE /mcp) or one that never was is the same 404, which
    tells the client to start a new session. A session outlives a server
    restart; the tool calls made in it are runs whose metadata names it, so
    their streams resume from any process (``runs.mcp``).
    """

    session_id = models.CharField(max_length=64, primary_key=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mcp_sessions")
    protocol_version = models.CharField(max_length=32)
    client_info = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "MCP session"

    def __str__(self) -> str:
        return f"{self.session_id} ({self.owner_id})"


class A2APushConfig(models.Model):
    """Where an A2A task's push notification goes (``CreateTaskPushNotificationConfig``); a task is a run.

    The task's JSON is POSTed to ``url`` once, when the run ends (completed,
    failed, canceled or input-required), through the run webhooks' delivery
    (``runs.services.webhooks``). ``notified_at`` is the claim of that one
    delivery: set before sending, by a conditional update, so a second pass
    over the run's end (or a registration racing it) sends nothing twice.
    ``token`` and the credentials are secrets, as ``Run.webhook`` is: the
    audit shows the URL redacted and neither of them.
    """

    # No index of its own: uq_a2a_push_run_config leads with the run.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="a2a_push_configs", db_index=False)
    config_id = models.CharField(max_length=255)
    url = models.TextField()
    token = models.TextField(blank=True, default="")
    auth_scheme = models.CharField(max_length=64, blank=True, default="")
    auth_credentials = models.TextField(blank=True, default="")
    # The A2A version of the method that registered it ("1.0" or "0.3"): the task is sent in its shapes.
    wire_version = models.CharField(max_length=8, default="1.0")
    created_at = models.DateTimeField(auto_now_add=True)
    notified_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        verbose_name = "A2A push notification config"
        ordering = ("created_at", "config_id")
        constraints = [
            models.UniqueConstraint(fields=["run", "config_id"], name="uq_a2a_push_run_config"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}: {self.config_id}"
