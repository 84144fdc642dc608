"""Which rows a request may touch: the one access-scope seam every thread lookup, list and count goes through.

Without custom auth a caller sees what it owns (``owner = user``), as
always. With custom auth (langgraph.json ``auth.path``) the owner column is
bookkeeping only: what a caller sees is what the project's ``@auth.on``
handler allowed for the request's action — everything (no handler, or a
handler answering ``None``/``True``) or the rows its filter matches. The
filter language is the LangGraph Platform's: ``{"key": value}`` and
``{"key": {"$eq": value}}`` for equality, ``{"key": {"$contains": v}}``
for membership in a list (a list ``v``: every element), ``$and``/``$or``
over lists of filters; keys name metadata keys. It compiles to SQL on the
JSON column (``core.db``'s containment on both backends), so pages, counts
and single lookups agree.

The scope travels on the request's user (``access_scope``), set by the
authentication layer for the route's action; a service that asks a handler
itself (creating a run: the handler sees the run's request) calls
``authorize``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.db.models import JSONField, Q, Value
from django.db.models.fields.json import KeyTransform

from core.errors import Forbidden

# Nesting of $and/$or a handler may return; deeper is refused as a handler bug, as on the Platform.
MAX_FILTER_DEPTH = 4


class AccessDenied(Forbidden):
    """A custom-auth handler refused the request (403 by default, or the status it raised)."""


class InvalidAuthFilter(AccessDenied):
    """A handler returned a filter outside the language: refused, never matched loosely."""

    def __init__(self, problem: str) -> None:
        super().__init__(f"The authorization handler returned an invalid filter: {problem}", status=500)


@dataclass(frozen=True)
class AccessScope:
    """The rows of a resource one request may touch: an owner's, or those a handler's filter matches.

    ``owner_id`` None and ``filters`` None is custom auth's "everything"
    (the handler allowed without a filter).
    """

    owner_id: int | None = None
    filters: Mapping[str, Any] | None = None

    def q(self, *, prefix: str = "") -> Q:
        """Return the scope as a ``Q`` on the model, or across a relation (``prefix="thread__"``)."""
        scope = Q()
        if self.owner_id is not None:
            scope &= Q(**{f"{prefix}owner_id": self.owner_id})
        if self.filters:
            scope &= filter_q(self.filters, field=f"{prefix}metadata")
        return scope

    @property
    def is_owner_only(self) -> bool:
        return self.owner_id is not None and not self.filters


def scope_of(user) -> AccessScope:
    """Return the scope the request's authentication gave ``user``, else the owner's own rows."""
    return getattr(user, "access_scope", None) or AccessScope(owner_id=user.pk)


# Set on a custom-auth user: (resource, action, value) -> AccessScope, raising AccessDenied.
Authorizer = Callable[[str, str, dict[str, Any]], AccessScope]


def authorize(user, *, resource: str, action: str, value: dict[str, Any]) -> AccessScope:
    """Ask custom auth's handler about ``action`` on ``value`` (it may add to ``value["metadata"]``).

    Without custom auth the answer is the owner's scope and ``value`` is left as it is.
    """
    authorizer: Authorizer | None = getattr(user, "authorizer", None)
    if authorizer is None:
        return AccessScope(owner_id=user.pk)
    return authorizer(resource, action, value)


async def aauthorize(user, *, resource: str, action: str, value: dict[str, Any]) -> AccessScope:
    """``authorize`` from async code: a handler's call goes to a thread; without custom auth, no hop at all."""
    if getattr(user, "authorizer", None) is None:
        return AccessScope(owner_id=user.pk)
    return await sync_to_async(authorize)(user, resource=resource, action=action, value=value)


def filter_q(filters: Mapping[str, Any], *, field: str = "metadata", depth: int = 0) -> Q:
    """Compile a handler's filter to a ``Q`` on the JSON column ``field``; refuse what the language lacks."""
    if not isinstance(filters, Mapping):
        raise InvalidAuthFilter(f"expected an object, got {type(filters).__name__}")
    if depth > MAX_FILTER_DEPTH:
        raise InvalidAuthFilter(f"nested deeper than {MAX_FILTER_DEPTH} levels of $and/$or")
    compiled = Q()
    for key, condition in filters.items():
        if key in ("$and", "$or"):
            compiled &= _combined(key, condition, field=field, depth=depth)
        elif not isinstance(key, str) or key.startswith("$"):
            raise InvalidAuthFilter(f"unknown operator {key!r} (use $and or $or)")
        else:
            compiled &= _key_q(key, condition, field=field)
    return compiled


def _combined(operator: str, branches: Any, *, field: str, depth: int) -> Q:
    if not isinstance(branches, list) or len(branches) < 2:
        raise InvalidAuthFilter(f"{operator} takes a list of at least two filters")
    compiled = [filter_q(branch, field=field, depth=depth + 1) for branch in branches]
    result = compiled[0]
    for branch in compiled[1:]:
        result = result | branch if operator == "$or" else result & branch
    return result


def _key_q(key: str, condition: Any, *, field: str) -> Q:
    if not isinstance(condition, Mapping):
        return _equal(key, condition, field=field)
    if len(condition) != 1:
        raise InvalidAuthFilter(f"{key}: an operator object has exactly one of $eq or $contains")
    operator, value = next(iter(condition.items()))
    if operator == "$eq":
        return _equal(key, value, field=field)
    if operator == "$contains":
        # The key's value is a list holding the element (every element, for a list).
        wanted = value if isinstance(value, list) else [value]
        return Q(**{f"{field}__jsoncontains": {key: wanted}})
    raise InvalidAuthFilter(f"{key}: unknown operator {operator!r} (use $eq or $contains)")


def _equal(key: str, value: Any, *, field: str) -> Q:
    # A key transform, not containment: {"tags": ["a", "b"]} must not "equal" "a",
    # and a key holding "__" must stay one key (a lookup string would split it).
    transform = KeyTransform(key, field)
    exact = transform.get_lookup("exact")
    assert exact is not None  # JSONField registers its own for key transforms
    return Q(exact(transform, Value(value, output_field=JSONField())))
