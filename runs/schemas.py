"""Run creation requests: validation of the fields the LangGraph SDK sends.

Everything is checked before admission, so a rejected request admits nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from rest_framework import serializers

from core.drf import StrictCharField
from core.errors import Invalid
from runs.services.run_request import (
    MULTITASK_STRATEGIES,
    STREAM_MODES,
    command_wins,
    run_command_check,
    run_config_clean,
    run_input_check,
    run_metadata_clean,
)
from runs.services.webhooks import MAX_URL_LENGTH, webhook_url_syntax


def checked(check: Callable[[Any], Any], value: Any, field: str) -> Any:
    """Run one of the run request's rules on a field's value; its refusal becomes that field's error."""
    try:
        return check(value)
    except Invalid as exc:
        inner = exc.field.removeprefix(field).lstrip(".")
        raise serializers.ValidationError({inner: exc.reason} if inner else exc.reason) from None


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
        return checked(run_input_check, value, "input")

    def validate_command(self, value):
        return checked(run_command_check, value, "command")

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
        return checked(run_metadata_clean, value, "metadata")

    def validate_config(self, value):
        return checked(run_config_clean, value, "config")

    def validate(self, attrs):
        attrs["input"], attrs["command"] = command_wins(attrs.get("input"), attrs.get("command"))
        if attrs.get("strict_resume"):
            raise serializers.ValidationError({"strict_resume": "strict_resume is not supported by this server"})
        return attrs
