"""Console actions: the one way a console page calls a domain service, and the audit of every staff action.

A refusal becomes an error message on the page the action returns to (never
a 500); with an ``audit``, the action is written to Django's admin log with
who, when, what, on which object, and what came of it (its outcome, or
"refused: …" and why), so the object's History page and the console's Staff actions
page list it. (Not in ``core.admin_site``: that module loads with the app
registry, before the admin log's model can be imported.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.contrib import messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.core.exceptions import ValidationError
from django.db.models import Model

from core.errors import DomainError

T = TypeVar("T")


def _done(result: Any) -> str:
    return "done"


@dataclass(frozen=True)
class StaffAction:
    """What a console action does, for the audit: ``what`` to ``target``, the object whose History lists it.

    ``describe`` turns the service's result into the outcome's words.
    """

    target: Model
    what: str
    flag: int = CHANGE
    describe: Callable[[Any], str] = _done


def staff_action_record(request, action: StaffAction, outcome: str) -> LogEntry:
    """Write one entry of the admin log: who (the request's user), when (now), what, on which object, the outcome."""
    return LogEntry.objects.log_actions(
        user_id=request.user.pk,
        queryset=[action.target],
        action_flag=action.flag,
        change_message=f"{action.what}: {outcome}",
        single_object=True,
    )


def service_call(
    request, service: Callable[..., T], /, *, audit: StaffAction | None = None, **kwargs
) -> tuple[bool, T | None]:
    """Call a service for a console action; return (done, result), recording it when ``audit`` says what it is."""
    refusal: str | None = None
    try:
        result = service(**kwargs)
    except DomainError as exc:
        refusal = str(exc)
    except ValidationError as exc:
        refusal = "; ".join(exc.messages)
    if refusal is not None:
        messages.error(request, refusal)
        if audit is not None:
            staff_action_record(request, audit, f"refused: {refusal}")
        return False, None
    if audit is not None:
        staff_action_record(request, audit, audit.describe(result))
    return True, result


class ServiceErrorMessagesMixin:
    """``service_call`` for model admins: their actions and buttons report refusals, and audit, the same way."""

    def call_service(
        self, request, service: Callable, /, *, audit: StaffAction | None = None, **kwargs
    ) -> tuple[bool, object]:
        return service_call(request, service, audit=audit, **kwargs)
