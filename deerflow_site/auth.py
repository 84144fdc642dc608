"""Authenticate API clients by key (``x-api-key`` or ``Authorization: Bearer``), or by langgraph.json's custom auth."""

from __future__ import annotations

from datetime import timedelta
from functools import cache
from typing import cast

from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone
from rest_framework import authentication, exceptions

from deerflow_site import custom_auth
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
    now = timezone.now()
    stale_before = connection.ops.adapt_datetimefield_value(now - _LAST_USED_RESOLUTION)
    users = get_user_model().objects.raw(_key_lookup(), [stale_before, hash_api_key(raw_key)])
    user = next(iter(users), None)
    if user is None:
        return None
    # Columns of the raw statement beside the user's own (see _key_lookup).
    if getattr(user, "api_key_stale"):  # noqa: B009
        ApiKey.objects.filter(pk=getattr(user, "api_key_id")).update(last_used_at=now)  # noqa: B009
    return user


@cache
def _key_lookup() -> str:
    """Return the key lookup as one statement, built once.

    Every API request runs it: compiled by the ORM each time (a filtered
    ``select_related`` with its ordering) it cost 1.3 ms of the 1.8 ms the
    authentication hop took in ``bench.run_costs``.
    """
    qn = connection.ops.quote_name
    users, keys = get_user_model()._meta, ApiKey._meta
    user_pk = cast(str, users.pk.column)  # a primary key always has a column
    return (
        f"SELECT u.*, k.{qn('id')} AS api_key_id,"
        f" (k.{qn('last_used_at')} IS NULL OR k.{qn('last_used_at')} < %s) AS api_key_stale"
        f" FROM {qn(users.db_table)} u JOIN {qn(keys.db_table)} k ON k.{qn('user_id')} = u.{qn(user_pk)}"
        f" WHERE k.{qn('digest')} = %s AND k.{qn('revoked_at')} IS NULL AND u.{qn('is_active')}"
    )


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """DRF authentication by API key; a wrong key is 401, never a silent anonymous.

    With custom auth configured, the project's handler is the only way in:
    every API route but the public ones answers a user or raises, so the
    session authentication after this one is never reached.
    """

    def authenticate(self, request):
        if (custom := custom_auth.active()) is not None:
            return _custom_authenticate(custom, request._request)
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


def _custom_authenticate(custom: custom_auth.CustomAuth, request):
    """Identify the caller with the project's handler and bind the route's access scope to its user."""
    match = request.resolver_match
    url_name = match.url_name if match else None
    if url_name in custom_auth.PUBLIC_ROUTES:
        return None
    try:
        # http.middleware_order auth_first identified the caller already (deerflow_site.custom_app).
        found = getattr(request, "scope", {}).get(custom_auth.SCOPE_IDENTITY) or custom_auth.identify(
            custom,
            custom_auth.http_arguments(custom, request),
            cache_key=custom_auth.cache_key(custom, request.headers.get),
        )
        user = custom_auth.user_for(found)
    except custom_auth.AuthenticationError as exc:
        raise (exceptions.PermissionDenied if exc.status == 403 else exceptions.AuthenticationFailed)(
            exc.detail
        ) from exc
    if url_name in custom_auth.IDENTITY_ONLY_ROUTES:
        custom_auth.bind(custom, found, user, resource=None, action=None, value={})
        return (user, None)
    route = custom_auth.route_action(url_name, request.method)
    if route is None:
        raise exceptions.PermissionDenied("This route is not covered by the configured custom auth.")
    custom_auth.bind(custom, found, user, resource=route[0], action=route[1], value=dict(match.kwargs))
    return (user, None)
