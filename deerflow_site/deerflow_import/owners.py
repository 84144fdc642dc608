"""DeerFlow user ids → Django users: a mapping file, else users created on request.

DeerFlow identifies owners by a string ``user_id`` (NULL: a shared or
legacy row that any user may open). Our threads always have an owner, so
NULL maps to one named user (``--null-owner``, ``deerflow-shared`` by default).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser

DEFAULT_NULL_OWNER = "deerflow-shared"


class OwnerMapError(Exception):
    """The mapping file is unreadable, or some owners map to no user (the message lists them)."""


def user_map_load(path: str) -> dict[str, str]:
    """Read ``{deerflow user id: username}`` from a JSON object or a two-column CSV."""
    text = Path(path).read_text(encoding="utf-8")
    if path.endswith(".json"):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise OwnerMapError(f"{path}: not JSON ({exc})") from None
        if not isinstance(data, dict) or not all(isinstance(v, str) and v for v in data.values()):
            raise OwnerMapError(f"{path}: must be an object of DeerFlow user id → username")
        return {str(k): v for k, v in data.items()}
    rows = [row for row in csv.reader(text.splitlines()) if row and not row[0].startswith("#")]
    if rows and rows[0][:2] == ["deerflow_user_id", "username"]:
        rows = rows[1:]
    if any(len(row) != 2 or not row[1] for row in rows):
        raise OwnerMapError(f"{path}: every CSV row must be 'deerflow_user_id,username'")
    return {row[0]: row[1] for row in rows}


@dataclass
class OwnerPlan:
    """Which username each DeerFlow owner (None: NULL) becomes, and which users must be created."""

    usernames: dict[str | None, str]
    emails: dict[str, str] = field(default_factory=dict)
    existing: set[str] = field(default_factory=set)

    @property
    def to_create(self) -> list[str]:
        return sorted(set(self.usernames.values()) - self.existing)


def owner_plan(
    user_ids: Iterable[str | None],
    *,
    mapping: Mapping[str, str],
    create_users: bool,
    null_owner: str = DEFAULT_NULL_OWNER,
    emails: Mapping[str, str] | None = None,
) -> OwnerPlan:
    """Decide every owner's user; refuse owners that map to no user when none may be created.

    An unmapped id becomes a user named after its DeerFlow email (when the
    source has a ``users`` table) or its id.
    """
    emails = emails or {}
    usernames: dict[str | None, str] = {}
    for user_id in set(user_ids):
        if user_id is None:
            usernames[None] = null_owner
        else:
            usernames[user_id] = mapping.get(user_id) or emails.get(user_id) or user_id
    existing = set(
        get_user_model().objects.filter(username__in=set(usernames.values())).values_list("username", flat=True)
    )
    plan = OwnerPlan(
        usernames, emails={usernames[u]: e for u, e in emails.items() if u in usernames}, existing=existing
    )
    if plan.to_create and not create_users:
        raise OwnerMapError(
            f"{len(plan.to_create)} owner(s) have no user here: {', '.join(plan.to_create[:10])}"
            " (map them with --users, or pass --create-users)"
        )
    return plan


def owners_resolve(plan: OwnerPlan, *, create: bool = True) -> dict[str | None, AbstractBaseUser]:
    """Return every owner's user, creating the missing ones (no usable password).

    With ``create=False`` (a dry run) the missing users are unsaved instances.
    """
    model = get_user_model()
    users = {user.get_username(): user for user in model.objects.filter(username__in=set(plan.usernames.values()))}
    for username in plan.to_create:
        email = plan.emails.get(username, "")
        users[username] = (
            model.objects.create_user(username=username, email=email)
            if create
            else model(username=username, email=email)
        )
    return {user_id: users[username] for user_id, username in plan.usernames.items()}
