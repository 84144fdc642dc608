"""Custom auth from langgraph.json (``auth.path``): a ``langgraph_sdk.Auth`` decides identity and access.

With ``auth.path`` set, identity comes only from the project's
``@auth.authenticate`` handler, over HTTP, SSE and WebSocket alike: our API
keys and Django sessions are no way around it. Each identity is a Django
user (created on first sight, unusable password) so that everything keyed
by owner keeps working; what a request may *see*, though, is what the
``@auth.on`` handler for its resource and action allowed
(``core.access``): the most specific handler wins (``threads.read``, then
``threads``, then ``*.read``, then ``@auth.on``), ``None``/``True`` allow,
``False`` is 403, a filter dict scopes the rows in SQL.

Fail closed: a handler that raises is 401 (authenticate) or 403
(authorization) with ``{"detail"}``; a route this module does not map to a
resource and action is 403; a handler for an action not covered is a
start-up error naming it. Threads, assistants and crons follow their
handlers (a filter matches their ``metadata``; ``create`` handlers see the
body and may stamp its metadata); assistants and crons no handler speaks for
stay the identity's own, as they were before the project had custom auth.
Store handlers see each request's namespace and may refuse it or rewrite it
(within the identity's own root; they return no filter). DeerFlow's
projects, which no SDK handler names, follow the wildcards' refusals and
stay the identity's own.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, cast
from urllib.parse import parse_qsl

from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.core.exceptions import ImproperlyConfigured
from langgraph_sdk import Auth

from core.access import AccessDenied, AccessScope, InvalidAuthFilter
from core.auth_user import AuthUser
from core.custom_encryption import note_filter_keys
from core.module_files import module_of_spec, project_setup

logger = logging.getLogger(__name__)

# What an authenticate handler may ask for (the Platform's names); WebSocket handshakes have no ``request``.
AUTHENTICATE_PARAMS = frozenset(
    {"request", "path", "method", "path_params", "query_params", "headers", "authorization"}
)
# Resource → the actions whose handlers this server applies; a handler for anything else stops start-up.
COVERED = {
    "threads": frozenset({"create", "read", "update", "delete", "search", "create_run"}),
    "assistants": frozenset({"create", "read", "update", "delete", "search"}),
    "crons": frozenset({"create", "read", "update", "delete", "search"}),
    "store": frozenset({"put", "get", "search", "list_namespaces", "delete"}),
}
# Resources whose rows stay the identity's own unless a handler (its own or a wildcard) decides:
# a project that never thought about them does not start sharing them.
OWNER_KEYED_WITHOUT_HANDLER = frozenset({"assistants", "crons"})
# Actions whose handler sees the request body: called where the body is read, not at authentication.
BODY_ACTIONS = frozenset({"create", "create_run"})
# Answered without credentials; /info needs an identity but touches no resource.
PUBLIC_ROUTES = frozenset({"ok", "openapi", "docs"})
IDENTITY_ONLY_ROUTES = frozenset({"info", "metrics"})
MAX_USERNAME = 150


class AuthenticationError(Exception):
    """The authenticate handler refused or failed: ``status`` (401, or the 403 it raised) and ``detail``."""

    def __init__(self, detail: str, status: int = 401) -> None:
        super().__init__(detail)
        self.detail = detail
        self.status = status


@dataclass(frozen=True)
class AuthCache:
    """``auth.cache``: successful authentications kept per the named headers' values."""

    cache_keys: tuple[str, ...]
    ttl_seconds: float
    max_size: int


@dataclass(frozen=True)
class CustomAuth:
    """langgraph.json's ``auth``: the loaded ``Auth``, where it came from, its handler's parameters, its cache."""

    auth: Auth
    path: str
    authenticate: Callable[..., Any]
    params: frozenset[str]
    cache: AuthCache | None = None
    # ``auth.openapi``: the ``securitySchemes`` and ``security`` /api/openapi.json documents instead of the API key.
    openapi: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Identity:
    """Who the authenticate handler said the caller is: the user object graphs get, and its permissions."""

    identity: str
    user: dict[str, Any]
    permissions: tuple[str, ...]


def active() -> CustomAuth | None:
    """Return the configured custom auth, None when API keys and sessions apply."""
    return settings.DEERFLOW.get("AUTH")


# -- loading (start-up) ------------------------------------------------------------


def openapi_from(raw: Any, *, where: str) -> dict[str, Any] | None:
    """Parse ``auth.openapi`` (``securitySchemes``: an object, ``security``: a list) or raise one line."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or not set(raw) <= {"securitySchemes", "security"}:
        raise ImproperlyConfigured(f"{where}: auth.openapi must be an object with securitySchemes and security")
    schemes, security = raw.get("securitySchemes", {}), raw.get("security", [])
    if not isinstance(schemes, dict) or not all(isinstance(s, dict) for s in schemes.values()):
        raise ImproperlyConfigured(f"{where}: auth.openapi.securitySchemes must map names to scheme objects")
    if not isinstance(security, list) or not all(isinstance(r, dict) for r in security):
        raise ImproperlyConfigured(f"{where}: auth.openapi.security must be a list of requirement objects")
    return {"securitySchemes": schemes, "security": security}


def load(
    spec: str,
    *,
    cache: AuthCache | None = None,
    folders: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    openapi: Mapping[str, Any] | None = None,
) -> CustomAuth:
    """Import the ``Auth`` at ``spec`` (``/abs/file.py:attr`` or ``module:attr``) and check what it asks for.

    ``folders`` and ``env`` are langgraph.json's, put in place first as for
    the graphs (the module may read a secret from the environment when it is
    imported). Every problem is one ``ImproperlyConfigured`` line.
    """
    project_setup(folders, env)
    auth = _import(spec)
    if (authenticate := auth._authenticate_handler) is None:
        raise ImproperlyConfigured(f"auth.path: {spec}: the Auth has no @auth.authenticate handler")
    params = _authenticate_params(spec, authenticate)
    _check_coverage(spec, auth)
    return CustomAuth(auth=auth, path=spec, authenticate=authenticate, params=params, cache=cache, openapi=openapi)


def _import(spec: str) -> Auth:
    try:
        module, attr = module_of_spec(spec, prefix="deerflow_auth")
    except Exception as exc:  # any import failure is a start-up error naming the path
        raise ImproperlyConfigured(f"auth.path: {spec} cannot be imported: {type(exc).__name__}: {exc}") from exc
    found = getattr(module, attr, None)
    if not isinstance(found, Auth):
        kind = "nothing" if found is None else type(found).__name__
        raise ImproperlyConfigured(f"auth.path: {spec} names {kind}, not a langgraph_sdk.Auth instance")
    return found


def _authenticate_params(spec: str, handler) -> frozenset[str]:
    names = inspect.signature(handler).parameters
    unsupported = [n for n, p in names.items() if n not in AUTHENTICATE_PARAMS and p.default is inspect.Parameter.empty]
    if unsupported:
        raise ImproperlyConfigured(
            f"auth.path: {spec}: @auth.authenticate asks for {', '.join(unsupported)}; "
            f"supported: {', '.join(sorted(AUTHENTICATE_PARAMS))}"
        )
    return frozenset(n for n in names if n in AUTHENTICATE_PARAMS)


def _check_coverage(spec: str, auth: Auth) -> None:
    """Refuse a handler this server would not apply: silently ignoring it would widen access."""
    for resource, action in auth._handlers:
        if resource == "*" or action in COVERED.get(resource, ()) or (resource in COVERED and action == "*"):
            continue
        name = f"@auth.on.{resource}" + ("" if action == "*" else f".{action}")
        applied = ", ".join(f"{r}.{a}" for r, actions in COVERED.items() for a in sorted(actions))
        raise ImproperlyConfigured(
            f"auth.path: {spec}: {name} is not supported yet (this server applies handlers for "
            f"{applied} and the wildcards); remove it"
        )


def cache_from(raw: Any, *, where: str) -> AuthCache | None:
    """Parse ``auth.cache`` (``cache_keys``, ``ttl_seconds``, ``max_size``) or raise one line."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("cache_keys", []), list):
        raise ImproperlyConfigured(f"{where}: auth.cache must be an object with a cache_keys list")
    keys = tuple(str(k).lower() for k in raw.get("cache_keys") or ("authorization",))
    ttl, size = raw.get("ttl_seconds", 60), raw.get("max_size", 1000)
    if not isinstance(ttl, int | float) or ttl <= 0 or not isinstance(size, int) or size <= 0:
        raise ImproperlyConfigured(f"{where}: auth.cache ttl_seconds and max_size must be positive numbers")
    return AuthCache(cache_keys=keys, ttl_seconds=float(ttl), max_size=size)


# -- authentication ---------------------------------------------------------------------


def http_arguments(custom: CustomAuth, request) -> dict[str, Any]:
    """Return what the authenticate handler asks for, from a Django request."""
    match = getattr(request, "resolver_match", None)
    values = {
        "request": lambda: request,
        "path": lambda: request.path,
        "method": lambda: request.method,
        "path_params": lambda: dict(match.kwargs) if match else {},
        "query_params": lambda: request.GET.dict(),
        "headers": lambda: {k.lower().encode(): v.encode() for k, v in request.headers.items()},
        "authorization": lambda: request.headers.get("authorization"),
    }
    return {name: values[name]() for name in custom.params}


def asgi_arguments(
    custom: CustomAuth, scope: Mapping[str, Any], path_params: dict[str, str], *, request: Any = None
) -> dict[str, Any]:
    """Return what the authenticate handler asks for, from an ASGI scope.

    A WebSocket handshake has no ``request`` object; a custom route
    (``http.app``) passes the Starlette ``Request`` its app would see.
    """
    if "request" in custom.params and request is None:
        raise AuthenticationError("The authenticate handler asks for `request`, which a WebSocket does not have", 403)
    headers = dict(scope.get("headers", []))
    values = {
        "request": lambda: request,
        "path": lambda: scope["path"],
        "method": lambda: scope.get("method", "GET"),
        "path_params": lambda: path_params,
        "query_params": lambda: dict(parse_qsl(scope.get("query_string", b"").decode())),
        "headers": lambda: headers,
        "authorization": lambda: (headers.get(b"authorization") or b"").decode() or None,
    }
    return {name: values[name]() for name in custom.params}


def identify(custom: CustomAuth, arguments: dict[str, Any], *, cache_key: tuple | None = None) -> Identity:
    """Run the authenticate handler (a cached answer when ``auth.cache`` allows) and normalise what it returned."""
    cached = _cache_get(custom, cache_key)
    if cached is not None:
        return cached
    handler = custom.authenticate
    try:
        result = async_to_sync(handler)(**arguments) if inspect.iscoroutinefunction(handler) else handler(**arguments)
    except Auth.exceptions.HTTPException as exc:
        raise AuthenticationError(str(exc.detail), exc.status_code if exc.status_code in (401, 403) else 401) from exc
    except Exception as exc:  # a handler bug must not let anyone in: 401, logged
        logger.exception("custom auth: the authenticate handler raised")
        raise AuthenticationError("Authentication failed") from exc
    found = _normalized(result)
    _cache_put(custom, cache_key, found)
    return found


def _normalized(result: Any) -> Identity:
    """Accept what the Platform accepts: a string, an object or dict with ``identity``, or ``(permissions, user)``."""
    permissions: Any = ()
    if isinstance(result, tuple) and len(result) == 2:
        permissions, result = result
    if isinstance(result, str):
        user: dict[str, Any] = {"identity": result}
    elif isinstance(result, Mapping) and "identity" in result:
        user = dict(result)
    elif hasattr(result, "identity"):
        user = {k: v for k, v in vars(result).items() if not k.startswith("_")} | {"identity": result.identity}
    else:
        raise AuthenticationError("Authentication failed: the handler returned no identity")
    permissions = user.pop("permissions", permissions) or ()
    identity = user["identity"]
    if not isinstance(identity, str) or not identity or len(identity) > MAX_USERNAME:
        raise AuthenticationError(f"Authentication failed: identity must be 1–{MAX_USERNAME} characters")
    user.setdefault("display_name", identity)
    user.setdefault("is_authenticated", True)
    return Identity(identity=identity, user=user, permissions=tuple(str(p) for p in permissions))


# Where an http.middleware_order auth_first layer leaves the identity it found (ASGI scope): not asked twice.
SCOPE_IDENTITY = "deerflow.identity"

# Requests authenticate on several threads at once: the LRU's reads and evictions hold the lock.
_answers: OrderedDict[tuple, tuple[float, Identity]] = OrderedDict()
_answers_lock = threading.Lock()


def _cache_get(custom: CustomAuth, key: tuple | None) -> Identity | None:
    if custom.cache is None or key is None:
        return None
    with _answers_lock:
        expires, found = _answers.get(key, (0.0, None))
        if found is not None and expires < time.monotonic():
            del _answers[key]
            return None
        return found


def _cache_put(custom: CustomAuth, key: tuple | None, found: Identity) -> None:
    if custom.cache is None or key is None:
        return
    with _answers_lock:
        _answers[key] = (time.monotonic() + custom.cache.ttl_seconds, found)
        while len(_answers) > custom.cache.max_size:
            _answers.popitem(last=False)


def cache_key(custom: CustomAuth, header) -> tuple | None:
    """The cache key for a request: its path to the handler, and the configured headers' values."""
    if custom.cache is None:
        return None
    return (custom.path, *(header(name) for name in custom.cache.cache_keys))


def user_for(found: Identity):
    """Return the Django user standing for an identity, created on first sight; refuse a staff account.

    A staff or superuser account is the support console's, reached by a
    session: an identity that happens to carry its name must not inherit
    its rows or its rights.
    """
    user: Any
    user, _ = get_user_model().objects.get_or_create(
        username=found.identity, defaults={"password": make_password(None)}
    )
    if user.is_staff or user.is_superuser or not user.is_active:
        raise AuthenticationError(f"Identity {found.identity!r} names an account that custom auth may not use", 403)
    user.langgraph_auth_user = {**found.user, "permissions": list(found.permissions)}
    return user


# -- authorization ------------------------------------------------------------------------


def authorize(custom: CustomAuth, found: Identity, resource: str, action: str, value: dict[str, Any]) -> AccessScope:
    """Run the most specific handler for ``resource.action`` on ``value``; return the scope it allows.

    ``value`` is the handler's to change (``value["metadata"]`` additions
    are stored by the caller).
    """
    handler = _handler(custom.auth, resource, action)
    if handler is None:
        return AccessScope()
    # The SDK types name its resources and actions as literals; ours are checked at start-up.
    context = Auth.types.AuthContext(
        resource=cast(Any, resource),
        action=cast(Any, action),
        user=AuthUser({**found.user, "permissions": list(found.permissions)}),
        permissions=list(found.permissions),
    )
    result = _run_handler(handler, context, value)
    if result in (None, True):
        return AccessScope()
    if result is False:
        raise AccessDenied()
    if not isinstance(result, dict):
        raise InvalidAuthFilter(f"expected a filter dict, None or a boolean, got {type(result).__name__}")
    note_filter_keys(result)  # custom encryption must leave these keys plaintext
    return AccessScope(filters=result)


def _run_handler(handler, context, value: dict[str, Any]) -> Any:
    try:
        if inspect.iscoroutinefunction(handler):
            return async_to_sync(handler)(ctx=context, value=value)
        return handler(ctx=context, value=value)
    except Auth.exceptions.HTTPException as exc:
        raise AccessDenied(str(exc.detail), status=exc.status_code) from exc
    except AssertionError as exc:  # the Platform's shorthand for a refusal
        raise AccessDenied(str(exc) or "Forbidden") from exc
    except Exception as exc:  # a handler bug denies, logged
        logger.exception("custom auth: the %s.%s handler raised", context.resource, context.action)
        raise AccessDenied("Forbidden: the authorization handler failed") from exc


def _handler(auth: Auth, resource: str, action: str):
    for key in ((resource, action), (resource, "*"), ("*", action), ("*", "*")):
        if key in auth._handlers:
            return auth._handlers[key][-1]
    return auth._global_handlers[-1] if auth._global_handlers else None


def bind(custom: CustomAuth, found: Identity, user, *, resource: str | None, action: str | None, value: dict) -> None:
    """Give the request's user its authorizer and, for an action decided at authentication, its scope."""
    user.authorizer = partial(_authorizer, custom, found, user)
    if resource is None or action is None or (resource in COVERED and action in BODY_ACTIONS) or resource == "store":
        return  # decided where the body is read (the Store's handlers see every request's namespace)
    user.access_scope = _authorizer(custom, found, user, resource, action, value)


def _authorizer(custom: CustomAuth, found: Identity, user, resource: str, action: str, value: dict) -> AccessScope:
    scope = authorize(custom, found, resource, action, value)
    # Uncovered resources keep their owner-keyed selectors: a handler's verdict
    # (403) holds there, and whatever it allowed, the identity sees its own rows.
    # So do assistants and crons when no handler speaks for them.
    if resource not in COVERED:
        return AccessScope(owner_id=user.pk)
    if resource == "store":
        if scope.filters:  # the Platform's store handlers rewrite value["namespace"]; a filter would mean nothing
            raise InvalidAuthFilter("a store handler returns no filter (rewrite value['namespace'] instead)")
        return AccessScope(owner_id=user.pk)
    if resource in OWNER_KEYED_WITHOUT_HANDLER and _handler(custom.auth, resource, action) is None:
        return AccessScope(owner_id=user.pk)
    return scope


# -- routes → resource and action -----------------------------------------------------------

_BY_METHOD = {
    "GET": "read",
    "HEAD": "read",
    "OPTIONS": "read",
    "POST": "update",
    "PUT": "update",
    "PATCH": "update",
    "DELETE": "delete",
}
# Thread and run routes whose action is not their method's.
_THREAD_ACTIONS = {
    ("thread-create", "POST"): "create",
    ("thread-search", "POST"): "search",
    ("thread-count", "POST"): "search",
    ("thread-prune", "POST"): "delete",
    ("thread-copy", "POST"): "read",
    ("thread-state-checkpoint", "POST"): "read",
    ("thread-history", "POST"): "read",
    ("thread-stream-events", "POST"): "read",
    ("run-create", "GET"): "search",
    ("run-create", "POST"): "create_run",
    ("run-stream", "POST"): "create_run",
    ("run-wait", "POST"): "create_run",
    ("stateless-run-create", "POST"): "create_run",
    ("stateless-run-stream", "POST"): "create_run",
    ("stateless-run-wait", "POST"): "create_run",
    ("stateless-run-batch", "POST"): "create_run",
    # MCP's and A2A's one route for many JSON-RPC methods: using it at all needs threads.read; each
    # method then asks for its own action where its body is read (create_run for a call or a message,
    # assistants.search for MCP's tool list, update to cancel, search to list).
    ("mcp", "POST"): "read",
    ("mcp", "GET"): "read",
    ("mcp", "DELETE"): "read",
    ("run-a2a", "POST"): "read",
}
_OTHER_ACTIONS = {
    ("assistant-search", "POST"): "search",
    ("assistant-count", "POST"): "search",
    ("assistant-create", "POST"): "create",
    ("cron-search", "POST"): "search",
    ("cron-count", "POST"): "search",
    ("cron-create", "POST"): "create",
    ("thread-cron-create", "POST"): "create",
    ("store-items", "PUT"): "put",
    ("store-items", "GET"): "get",
    ("store-items", "DELETE"): "delete",
    ("store-item-search", "POST"): "search",
    ("store-namespaces", "POST"): "list_namespaces",
}


def route_action(url_name: str | None, method: str) -> tuple[str, str] | None:
    """Return (resource, action) for an API route, None for a route this module does not know."""
    if not url_name:
        return None
    if url_name.startswith("assistant"):
        resource = "assistants"
    elif "cron" in url_name:
        resource = "crons"
    elif url_name.startswith("store"):
        resource = "store"
    elif url_name.startswith("project"):
        resource = "projects"  # DeerFlow's own: no SDK handler names it, so only the wildcards apply
    elif url_name.startswith(("thread", "run", "stateless-run")) or url_name == "mcp":
        resource = "threads"
    else:
        return None
    table = _THREAD_ACTIONS if resource == "threads" else _OTHER_ACTIONS
    action = table.get((url_name, method)) or _BY_METHOD.get(method)
    return (resource, action) if action else None
