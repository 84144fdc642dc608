"""A run request as the start service takes it: typed, validated, whoever sent it.

The REST routes validate a JSON body with ``runs.schemas.RunCreateSerializer``
and build a ``RunRequest`` from it; the protocol-v2 commands build one from
their typed parameters; a cron builds one from the request it stored. The
rules for what a client may put in a run (messages LangChain can coerce, no
secrets, no keys the server owns) are the functions below, which every one of
them calls; a refusal is ``Invalid`` naming the field.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from django.conf import settings

from checkpoints.modes import INTERNAL_MODE_KEY, strip_server_owned_metadata
from core.custom_encryption import listed_json_keys
from core.errors import Invalid
from core.validation import messages_problems, metadata_size_check
from runs.assistant_selectors import ResolvedAssistant
from runs.services.webhooks import redacted_url

STREAM_MODES = ("values", "updates", "messages-tuple", "custom", "debug", "tasks", "checkpoints")
# What LangGraph calls each client stream mode (the SSE event keeps the client's
# name, except messages-tuple whose events are named "messages").
LANGGRAPH_MODES = {"messages-tuple": "messages"}
MULTITASK_STRATEGIES = ("reject", "interrupt", "rollback", "enqueue")
COMMAND_KEYS = frozenset({"resume", "update", "goto"})
# Keys the server owns in configurable: the thread and checkpoint address, the
# caller's identity and the internal channel-mode key.
SERVER_CONFIGURABLE_KEYS = frozenset(
    {
        "thread_id",
        "checkpoint_id",
        "checkpoint_ns",
        "checkpoint_map",
        "langgraph_auth_user_id",
        "user_id",
        INTERNAL_MODE_KEY,
    }
)
SECRET_KEY_PATTERN = re.compile(r"(api[_-]?key|secret|password|passwd|token|authorization|credential)", re.IGNORECASE)


def run_input_check(value: Any) -> Any:
    """Return the graph input (an object or None); ``Invalid`` names a message LangChain could not coerce."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise Invalid("input", "must be an object or null")
    if value.get("messages") is not None and (problems := messages_problems(value["messages"])):
        where, why = next(iter(problems.items()))
        raise Invalid(f"input.{where}", why)
    return value


def run_command_check(value: Any) -> dict[str, Any] | None:
    """Return the command (``resume``, ``update``, ``goto``) or None; ``Invalid`` names what is wrong."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise Invalid("command", "must be an object")
    if unknown := set(value) - COMMAND_KEYS:
        raise Invalid("command", f"unknown command key(s): {', '.join(sorted(unknown))}")
    goto = value.get("goto")
    if goto is not None and not _valid_goto(goto):
        raise Invalid("command.goto", "goto must be a node name, a {node, input} object, or a list of them")
    update = value.get("update")
    if isinstance(update, dict) and update.get("messages") is not None:
        if problems := messages_problems(update["messages"]):
            where, why = next(iter(problems.items()))
            raise Invalid(f"command.update.{where}", why)
    return value


def run_metadata_clean(value: Mapping[str, Any] | None) -> dict[str, Any]:
    """Return the client's metadata without the keys the server owns; refuse secrets and oversize.

    Oversize is ``core.validation``'s refusal naming ``limits.max_metadata_bytes``, as for a thread's.
    """
    cleaned = strip_server_owned_metadata(value)
    _reject_secrets(cleaned, "metadata")
    metadata_size_check(cleaned, field="")
    return cleaned


def run_config_clean(value: Mapping[str, Any] | None) -> dict[str, Any]:
    """Return the client's config without server-owned ``configurable`` keys; refuse secrets and bad limits."""
    config = dict(value or {})
    configurable = config.get("configurable") or {}
    if not isinstance(configurable, dict):
        raise Invalid("config.configurable", "configurable must be an object")
    _reject_secrets(configurable, "config.configurable")
    config["configurable"] = {k: v for k, v in configurable.items() if k not in SERVER_CONFIGURABLE_KEYS}
    limit = config.get("recursion_limit", 1)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise Invalid("config.recursion_limit", "recursion_limit must be a positive integer")
    tags = config.get("tags")
    if tags is not None and (not isinstance(tags, list) or not all(isinstance(t, str) for t in tags)):
        raise Invalid("config.tags", "tags must be a list of strings")
    return config


def headers_matching(headers: Mapping[str, str], rules: Mapping[str, list[str]] | None) -> dict[str, str]:
    """Return the request headers langgraph.json's ``http.configurable_headers`` (or ``logging_headers``) picks.

    A header is picked when a pattern of ``includes`` matches its (lowercased)
    name and none of ``excludes`` does (``*`` wildcards); never one that
    looks like a secret or names a key the server owns, whatever the patterns.
    """
    if not rules:
        return {}
    copied = {}
    for name, value in headers.items():
        name = name.lower()
        if not any(fnmatchcase(name, p) for p in rules.get("includes", [])):
            continue
        if any(fnmatchcase(name, p) for p in rules.get("excludes", [])):
            continue
        if SECRET_KEY_PATTERN.search(name) or name in SERVER_CONFIGURABLE_KEYS or name == "cookie":
            continue
        copied[name] = value
    return copied


def _valid_goto(goto: Any) -> bool:
    items = goto if isinstance(goto, list) else [goto]
    return all(
        isinstance(item, str) or (isinstance(item, dict) and isinstance(item.get("node"), str)) for item in items
    )


def _reject_secrets(values: Mapping[str, Any], where: str) -> None:
    """Refuse a key that looks like a secret, unless LANGGRAPH_AES_JSON_KEYS seals it (stored sealed, kept
    out of checkpoint metadata: ``core.aes_json``)."""
    sealed = listed_json_keys()
    for key in values:
        if SECRET_KEY_PATTERN.search(str(key)) and key not in sealed:
            raise Invalid(
                f"{where}.{key}",
                "looks like a secret; secrets must not travel in runs (they would be stored and logged)",
            )


def command_wins(input: Any, command: dict[str, Any] | None) -> tuple[Any, dict[str, Any] | None]:
    """Return ``(input, command)`` with one graph input: the command when it says something, else ``input``.

    The LangGraph Platform's rule (langgraph-api 0.16.7 runs ``map_cmd(command)``
    whenever the command is non-empty and never refuses the pair), which
    clients rely on: the Agent Chat UI's inbox resumes with ``input: {}``
    beside ``command: {"resume": …}``. An empty command (``{}``) commands
    nothing and the input runs.
    """
    return (None, command) if command else (input, None)


@dataclass(frozen=True)
class RunRequest:
    """One validated run request: what to run, on what input, streamed how, admitted how."""

    # A graph name, a system assistant id or the caller's assistant id (the start service resolves it).
    assistant_id: str
    input: Any = None
    command: dict[str, Any] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Any] | None = None
    # Resume from this checkpoint; ``checkpoint_thread_id`` is the thread a ``checkpoint`` object named.
    checkpoint_id: str | None = None
    checkpoint_thread_id: str | None = None
    stream_mode: tuple[str, ...] = ("values",)
    stream_subgraphs: bool = False
    stream_resumable: bool = False
    on_disconnect: str = "continue"
    interrupt_before: str | list[str] | None = None
    interrupt_after: str | list[str] | None = None
    multitask_strategy: str | None = None
    if_not_exists: str | None = None
    on_completion: str | None = None
    durability: str | None = None
    # POSTed the run's final record when it ends; the URL was checked for syntax (its addresses: at start).
    webhook: str | None = None
    after_seconds: float | None = None

    @classmethod
    def from_body(cls, data: Mapping[str, Any]) -> RunRequest:
        """Build from a validated REST body (``RunCreateSerializer``) or the body a cron stored."""
        checkpoint = data.get("checkpoint") or {}
        durability = data.get("durability")
        if durability is None and data.get("checkpoint_during") is not None:
            durability = "async" if data["checkpoint_during"] else "exit"
        return cls(
            assistant_id=data["assistant_id"],
            input=data.get("input"),
            command=data.get("command"),
            metadata=dict(data.get("metadata") or {}),
            config=dict(data.get("config") or {}),
            context=data.get("context"),
            checkpoint_id=data.get("checkpoint_id") or checkpoint.get("checkpoint_id") or None,
            checkpoint_thread_id=checkpoint.get("thread_id"),
            stream_mode=tuple(data.get("stream_mode") or ("values",)),
            stream_subgraphs=bool(data.get("stream_subgraphs")),
            stream_resumable=bool(data.get("stream_resumable")),
            on_disconnect=data.get("on_disconnect") or "continue",
            interrupt_before=data.get("interrupt_before"),
            interrupt_after=data.get("interrupt_after"),
            multitask_strategy=data.get("multitask_strategy"),
            if_not_exists=data.get("if_not_exists"),
            on_completion=data.get("on_completion"),
            durability=durability,
            webhook=data.get("webhook") or None,
            after_seconds=data.get("after_seconds") or None,
        )

    def replace(self, **changes: Any) -> RunRequest:
        return dataclasses.replace(self, **changes)

    def with_headers(self, copied: Mapping[str, str]) -> RunRequest:
        """Return the request with copied request headers in ``configurable`` (the body's own keys win)."""
        if not copied:
            return self
        configurable = {**copied, **(self.config.get("configurable") or {})}
        return self.replace(config={**self.config, "configurable": configurable})

    def checkpoint_for(self, thread_id: str) -> str | None:
        """The checkpoint to resume from; ``Invalid`` when a ``checkpoint`` object named another thread."""
        if self.checkpoint_thread_id not in (None, thread_id):
            raise Invalid("checkpoint.thread_id", "does not match the run's thread")
        return self.checkpoint_id

    def with_assistant(self, assistant: ResolvedAssistant) -> RunRequest:
        """Return the request with the assistant's config and context merged under the run's own.

        The run's keys win; ``configurable`` is merged key by key (the Platform's
        rule), ``context`` likewise. ``assistant_id`` becomes the graph to run.
        """
        base, own = assistant.config or {}, self.config
        config = {**base, **own}
        configurable = {**(base.get("configurable") or {}), **(own.get("configurable") or {})}
        if configurable or "configurable" in config:
            config["configurable"] = configurable
        context = {**(assistant.context or {}), **(self.context or {})}
        return self.replace(assistant_id=assistant.graph_id, config=config, context=context or self.context)

    def run_kwargs(self, checkpoint_id: str | None) -> dict[str, Any]:
        """Return what the executor needs, as stored on the run row (no secrets: refused earlier)."""
        runs = settings.DEERFLOW_CONFIG.runs
        limit = self.config.get("recursion_limit")
        return {
            "input": self.input,
            "command": self.command,
            "config": {k: v for k, v in self.config.items() if k in ("tags", "configurable", "run_name")},
            "context": self.context,
            "stream_mode": list(self.stream_mode),
            "stream_subgraphs": self.stream_subgraphs,
            "stream_resumable": self.stream_resumable,
            "on_disconnect": self.on_disconnect,
            "interrupt_before": self.interrupt_before,
            "interrupt_after": self.interrupt_after,
            "checkpoint_id": checkpoint_id,
            "durability": self.durability,
            # None: the graph's own with_config default applies, else runs.recursion_limit (executor).
            "recursion_limit": min(limit, runs.max_recursion_limit) if limit else None,
            "on_completion": self.on_completion,
            "after_seconds": self.after_seconds,
            # Where the webhook goes, without the token a URL may carry (the URL itself: Run.webhook).
            "webhook": redacted_url(self.webhook) if self.webhook else None,
        }

    def admission_options(self) -> dict[str, Any]:
        """Return ``run_admit``'s delayed start and webhook."""
        return {"after_seconds": self.after_seconds or 0, "webhook": self.webhook or ""}

    def as_handler_value(self, thread_id: str | None) -> dict[str, Any]:
        """The request as custom auth's ``threads.create_run`` handler sees it (the Platform's shape)."""
        return {
            "thread_id": thread_id,
            "assistant_id": self.assistant_id,
            "metadata": dict(self.metadata),
            "multitask_strategy": self.multitask_strategy,
            "if_not_exists": self.if_not_exists,
            "after_seconds": self.after_seconds,
            "kwargs": {
                "input": self.input,
                "command": self.command,
                "config": self.config or None,
                "context": self.context,
                "stream_mode": list(self.stream_mode),
            },
        }
