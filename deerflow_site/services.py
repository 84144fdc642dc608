"""Writes of the site app: users and API keys."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from deerflow_site.models import ApiKey, generate_api_key, hash_api_key


@transaction.atomic
def api_key_create(*, username: str, name: str = "") -> tuple[AbstractBaseUser, str]:
    """Create the user if missing and a new key for it; return (user, raw key).

    The raw key is returned once and never stored.
    """
    user, _ = get_user_model().objects.get_or_create(username=username)
    raw = generate_api_key()
    key = ApiKey(user=user, name=name, digest=hash_api_key(raw), prefix=raw[:12])
    key.full_clean()
    key.save()
    return user, raw
