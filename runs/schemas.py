"""Run creation requests: validation of the fields the LangGraph SDK sends.

Everything is checked before admission, so a rejected request admits nothing.
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from rest_framework import serializers

from checkpoints.modes import INTERNAL_MODE_KEY, strip_server_owned_metadata
from core.drf import StrictCharField
from core.errors import Invalid
from core.validation import messages_problems, metadata_size_check
from runs.services.webhooks import MAX_URL_LENGTH, webhook_url_syntax

STREAM_MODES = ("values", "updates", "messages-tuple", "custom", "debug", "tasks", "checkpoints")
# What LangGraph calls each client stream mode (the SSE event keeps the client's
# name, except messages-tuple whose events are named "messages").
LANGGRAPH_MODES = {"messages-tuple": "messages"}
MULTITASK_STRATEGIES = ("reject", "interrupt", "rollback", "enqueue")
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


class _JSONObject(serializers.JSONField):
    def to_internal_value(self, data):
        if data is not None and not isinstance(data, dict):
            self.fail("invalid")
        return data

    default_error_messages = {"invalid": "must be an object"}


class _NodeList(serializers.JSONField):
    default_error_messages = {"invalid": 'must be "*" or a list of node names'}

    def to_internal_value(self, data):
        if data is None or data == "*":
            return data
        if not isinstance(data, list) or not all(isinstance(n, str) for n in data):
            self.fail("invalid")
        return data


class _StreamModes(serializers.JSONField):
    def to_internal_value(self, data):
        modes = [data] if isinstance(data, str) else data
        if modes is None:
            return ["values"]
        if not isinstance(modes, list) or not all(isinstance(m, str) for m in modes):
            raise serializers.ValidationError("must be a stream mode or a list of them")
        unknown = [m for m in modes if m not in STREAM_MODES]
        if unknown:
            raise serializers.ValidationError(
                f"unsupported stream mode(s): {', '.join(unknown)} (supported: {', '.join(STREAM_MODES)})"
            )
        return list(dict.fromkeys(modes)) or ["values"]


class _Seconds(serializers.FloatField):
    """A JSON number of seconds (not a numeric string or a boolean, as FloatField would take)."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            self.fail("invalid")
        return super().to_internal_value(data)


class RunCreateSerializer(serializers.Serializer):
    """The body of every run-creating route (stateful and stateless)."""

    # A graph name, a system assistant id or the caller's assistant id:
    # resolved with the caller by the start service (runs.services.start).
    assistant_id = StrictCharField()
    input = serializers.JSONField(required=False, allow_null=True)
    command = _JSONObject(required=False, allow_null=True)
    metadata = _JSONObject(required=False, allow_null=True)
    config = _JSONObject(required=False, allow_null=True)
    # A declared field: the serializer's metaclass takes it out of the class, so it never
    # shadows Serializer.context (the stubs see a class attribute overriding the property).
    context = _JSONObject(required=False, allow_null=True)  # type: ignore[assignment]
    checkpoint = _JSONObject(required=False, allow_null=True)
    checkpoint_id = StrictCharField(required=False, allow_null=True)
    interrupt_before = _NodeList(required=False, allow_null=True)
    interrupt_after = _NodeList(required=False, allow_null=True)
    stream_mode = _StreamModes(required=False, allow_null=True, default=None)
    stream_subgraphs = serializers.BooleanField(required=False, default=False)
    stream_resumable = serializers.BooleanField(required=False, default=False)
    on_disconnect = serializers.ChoiceField(choices=["cancel", "continue"], required=False, allow_null=True)
    multitask_strategy = serializers.ChoiceField(choices=MULTITASK_STRATEGIES, required=False, allow_null=True)
    if_not_exists = serializers.ChoiceField(choices=["reject", "create"], required=False, allow_null=True)
    on_completion = serializers.ChoiceField(choices=["delete", "keep"], required=False, allow_null=True)
    durability = serializers.ChoiceField(choices=["sync", "async", "exit"], required=False, allow_null=True)
    checkpoint_during = serializers.BooleanField(required=False, allow_null=True)
    strict_resume = serializers.BooleanField(required=False, allow_null=True)
    # POSTed the run's final record when it ends (runs.services.webhooks has the URL rules).
    webhook = StrictCharField(required=False, allow_null=True, max_length=MAX_URL_LENGTH)
    # A delayed start: the run is admitted now and starts this many seconds later.
    after_seconds = _Seconds(required=False, allow_null=True, min_value=0)
    # Accepted and ignored: LangSmith feedback and tracing need LangSmith, which
    # this server does not talk to; raise_error is the sync SDK's own (0.4.3
    # puts it in the /wait body; the outcome body always carries __error__).
    feedback_keys = serializers.ListField(child=StrictCharField(), required=False, allow_null=True)
    langsmith_tracer = _JSONObject(required=False, allow_null=True)
    raise_error = serializers.BooleanField(required=False, allow_null=True)

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: "unknown run option" for name in unknown})
        return super().to_internal_value(data)

    def validate_input(self, value):
        if value is None:
            return None
        if not isinstance(value, dict):
            raise serializers.ValidationError("must be an object or null")
        if value.get("messages") is not None and (problems := messages_problems(value["messages"])):
            raise serializers.ValidationError(problems)
        return value

    def validate_command(self, value):
        if value is None:
            return None
        unknown = set(value) - {"resume", "update", "goto"}
        if unknown:
            raise serializers.ValidationError(f"unknown command key(s): {', '.join(sorted(unknown))}")
        goto = value.get("goto")
        if goto is not None and not _valid_goto(goto):
            raise serializers.ValidationError("goto must be a node name, a {node, input} object, or a list of them")
        update = value.get("update")
        if isinstance(update, dict) and update.get("messages") is not None:
            if problems := messages_problems(update["messages"]):
                raise serializers.ValidationError({"update": problems})
        return value

    def validate_webhook(self, value):
        if value is None:
            return None
        try:  # the syntax here; the host's addresses are checked by the start service (it resolves them)
            webhook_url_syntax(value)
        except Invalid as exc:
            raise serializers.ValidationError(exc.reason) from None
        return value

    def validate_after_seconds(self, value):
        cap = settings.DEERFLOW_CONFIG.runs.max_after_seconds
        if value is not None and value > cap:
            raise serializers.ValidationError(f"must be at most {cap} seconds (runs.max_after_seconds)")
        return value

    def validate_metadata(self, value):
        value = strip_server_owned_metadata(value)
        _reject_secrets(value, "metadata")
        metadata_size_check(value, field="")
        return value

    def validate_config(self, value):
        value = dict(value or {})
        configurable = value.get("configurable") or {}
        if not isinstance(configurable, dict):
            raise serializers.ValidationError("configurable must be an object")
        _reject_secrets(configurable, "config.configurable")
        value["configurable"] = {k: v for k, v in configurable.items() if k not in SERVER_CONFIGURABLE_KEYS}
        if "recursion_limit" in value and (
            isinstance(value["recursion_limit"], bool)
            or not isinstance(value["recursion_limit"], int)
            or value["recursion_limit"] < 1
        ):
            raise serializers.ValidationError("recursion_limit must be a positive integer")
        tags = value.get("tags")
        if tags is not None and (not isinstance(tags, list) or not all(isinstance(t, str) for t in tags)):
            raise serializers.ValidationError("tags must be a list of strings")
        return value

    def validate(self, attrs):
        attrs = _command_wins(attrs)
        if attrs.get("strict_resume"):
            raise serializers.ValidationError({"strict_resume": "strict_resume is not supported by this server"})
        return attrs


def _command_wins(attrs: dict[str, Any]) -> dict[str, Any]:
    """Return the request with one graph input: the command when it says something, else ``input``.

    The LangGraph Platform's rule (langgraph-api 0.16.7 runs ``map_cmd(command)``
    whenever the command is non-empty and never refuses the pair), which
    clients rely on: the Agent Chat UI's inbox resumes with ``input: {}``
    beside ``command: {"resume": …}``. An empty command (``{}``) commands
    nothing and the input runs. Both were validated above either way.
    """
    if attrs.get("command"):
        return {**attrs, "input": None}
    return {**attrs, "command": None} if "command" in attrs else attrs


def _valid_goto(goto: Any) -> bool:
    items = goto if isinstance(goto, list) else [goto]
    return all(
        isinstance(item, str) or (isinstance(item, dict) and isinstance(item.get("node"), str)) for item in items
    )


def _reject_secrets(values: dict[str, Any], field: str) -> None:
    for key in values:
        if SECRET_KEY_PATTERN.search(str(key)):
            raise serializers.ValidationError(
                f"{field}.{key} looks like a secret; secrets must not travel in runs (they would be stored and logged)"
            )
