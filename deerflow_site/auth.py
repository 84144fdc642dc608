"""Authenticate API clients by key (``x-api-key`` or ``Authorization: Bearer``)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from rest_framework import authentication, exceptions

from deerflow_site.models import ApiKey, hash_api_key

# Touch last_used_at at most this often, so reads do not turn into writes.
_LAST_USED_RESOLUTION = timedelta(minutes=5)


def raw_key_from_headers(headers) -> str | None:
    """Return the key a client sent, or None; ``headers`` is case-insensitive."""
    if key := headers.get("x-api-key"):
        return key.strip()
    auth = headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return None


def user_for_api_key(raw_key: str):
    """Return the active user owning ``raw_key``, or None."""
    key = (
        ApiKey.objects.select_related("user")
        .filter(digest=hash_api_key(raw_key), revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    if key is None:
        return None
    now = timezone.now()
    if key.last_used_at is None or now - key.last_used_at > _LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
    return key.user


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """DRF authentication by API key; a wrong key is 401, never a silent anonymous."""

    def authenticate(self, request):
        raw = raw_key_from_headers(request.headers)
        if raw is None:
            return None
        user = user_for_api_key(raw)
        if user is None:
            raise exceptions.AuthenticationFailed("Invalid API key.")
        return (user, None)

    def authenticate_header(self, request) -> str:
        # Present, so DRF answers 401 (not 403) when credentials are missing.
        return 'Bearer realm="api"'
