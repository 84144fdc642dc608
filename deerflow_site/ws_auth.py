"""WebSocket identity: an API key (header or ``?api_key=``) or a same-origin Django session; or custom auth.

A key's user sees its own runs only; a staff session (the support console)
also sees others' runs when it has the view permission on runs. With
langgraph.json's custom auth the project's handler is the only identity, as
over HTTP: a socket reads its thread (``threads.read``), and the runs it
starts ask ``threads.create_run``.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.middleware import BaseMiddleware
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.http.request import validate_host

from core.access import AccessDenied
from deerflow_site import custom_auth
from deerflow_site.auth import raw_key_from_headers, user_for_api_key

# The thread a socket's path names (both WebSocket routes, runs.routing).
_THREAD_PATH = re.compile(r"/threads/(?P<thread_id>[^/]+)/")


class _Headers(dict):
    """Case-insensitive view of ASGI headers, enough for raw_key_from_headers()."""

    def __init__(self, raw) -> None:
        super().__init__((k.decode().lower(), v.decode()) for k, v in raw)

    def get(self, key, default=None):
        return super().get(key.lower(), default)


class ApiKeyWebsocketMiddleware(BaseMiddleware):
    """Put the API key's user in ``scope["user"]``; refuse cookie sessions from other origins.

    Browsers cannot set headers on a WebSocket, hence ``?api_key=`` (the
    server's own log lines have it redacted, ``deerflow_site.server_logs``;
    proxies in front need the same care); a key is no ambient
    credential, so it counts from any origin. A session cookie is only
    honoured from the server's own origin, which stops cross-site WebSocket
    hijacking of a logged-in admin.
    """

    async def __call__(self, scope, receive, send):
        if (custom := custom_auth.active()) is not None:
            scope["user"] = await database_sync_to_async(_custom_user)(custom, scope)
            # Not a browser session: no staff view of others' runs, whatever the account.
            scope["api_key_auth"] = True
            return await super().__call__(scope, receive, send)
        headers = _Headers(scope.get("headers", []))
        query = parse_qs(scope.get("query_string", b"").decode())
        raw = raw_key_from_headers(headers) or (query.get("api_key") or [None])[0]
        # Consumers tell a key's user from a browser session: only a staff
        # session (the console) may watch other users' runs.
        scope["api_key_auth"] = bool(raw)
        if raw:
            scope["user"] = await database_sync_to_async(user_for_api_key)(raw) or AnonymousUser()
        elif not _same_origin(headers.get("origin"), headers.get("host")):
            scope["user"] = AnonymousUser()
        return await super().__call__(scope, receive, send)


def _custom_user(custom: custom_auth.CustomAuth, scope):
    """The handler's user with the thread-read scope of the socket's thread, else anonymous (closed 4401)."""
    match = _THREAD_PATH.search(scope.get("path", ""))
    path_params = {"thread_id": match["thread_id"]} if match else {}
    headers = _Headers(scope.get("headers", []))
    try:
        arguments = custom_auth.asgi_arguments(custom, scope, path_params)
        found = custom_auth.identify(custom, arguments, cache_key=custom_auth.cache_key(custom, headers.get))
        user = custom_auth.user_for(found)
        custom_auth.bind(custom, found, user, resource="threads", action="read", value=dict(path_params))
    except (custom_auth.AuthenticationError, AccessDenied):
        return AnonymousUser()
    return user


def _same_origin(origin: str | None, host: str | None) -> bool:
    """Return whether a cookie-carrying handshake comes from a page of this server.

    Cookies are sent per host, whatever the port, so a page on another port
    of the same host (a frontend's dev server, an allowed CORS origin) would
    carry the admin's session: the Origin's ``host:port`` must be the
    request's ``Host`` (the scheme is left out: behind a TLS proxy the socket
    is ``ws`` while the page is ``https``), or the origin one of Django's
    ``CSRF_TRUSTED_ORIGINS``, as for a form post. No Origin: not a browser.
    """
    if not origin:
        return True
    if origin in settings.CSRF_TRUSTED_ORIGINS:
        return True
    parts = urlsplit(origin)
    if not host or parts.netloc.lower() != host.lower():
        return False
    return validate_host(parts.hostname or "", settings.ALLOWED_HOSTS)


def websocket_auth_stack(inner):
    """Session auth (for the admin's browser) with API keys on top."""
    return AuthMiddlewareStack(ApiKeyWebsocketMiddleware(inner))
