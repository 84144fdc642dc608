"""Writes of the site app: users and API keys."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from deerflow_site.models import ApiKey, generate_api_key, hash_api_key


@transaction.atomic
def api_key_create(*, username: str, name: str = "") -> tuple[User, str]:
    """Create the user if missing and a new key for it; return (user, raw key).

    The raw key is returned once and never stored.
    """
    user, _ = get_user_model().objects.get_or_create(username=username)
    _, raw = api_key_issue(user=user, name=name)
    return user, raw


def api_key_issue(*, user: User, name: str = "") -> tuple[ApiKey, str]:
    """Give ``user`` a new key; return it and its raw form (only the digest is stored: the one time it is seen)."""
    raw = generate_api_key()
    key = ApiKey(user=user, name=name, digest=hash_api_key(raw), prefix=raw[:12])
    key.full_clean()
    key.save()
    return key, raw


def api_keys_revoke(*, keys: QuerySet[ApiKey]) -> list[ApiKey]:
    """Revoke the keys of ``keys`` still live; return the ones this call revoked."""
    now = timezone.now()
    live = list(keys.filter(revoked_at__isnull=True))
    ApiKey.objects.filter(pk__in=[key.pk for key in live], revoked_at__isnull=True).update(revoked_at=now)
    for key in live:
        key.revoked_at = now
    return live
