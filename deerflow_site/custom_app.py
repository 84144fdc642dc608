"""langgraph.json's ``http.app``: the project's own Starlette or FastAPI app, served beside the API.

As on the Platform, the project's routes come first: a request whose path
and method one of its routes matches (Starlette's own ``route.matches``)
goes to the project's app, anything else to ours. Its lifespan runs inside
ours (started after our runtime, stopped before it). With
``http.enable_custom_route_auth`` and custom auth (``auth.path``), a
request to the project's routes must pass the ``@auth.authenticate``
handler first (401/403 with ``{"detail"}`` otherwise) and the app finds the
identity in ``scope["user"]`` (``identity``, ``permissions`` and what the
handler returned); without it, the project's routes are open, as there.

The app must be a Starlette app (FastAPI's included): its routes are what
decide the dispatch, so another ASGI callable is a start-up error naming
the path. Our own middleware (CORS, body limits) does not wrap its routes;
its middleware wraps ours (``CustomApp.around``, ordered by
``http.middleware_order``), as the Platform runs it on every route.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from core.auth_user import AuthUser
from core.module_files import module_of_spec, project_setup

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def load_app(spec: str, *, folders: Sequence[str] = (), env: Mapping[str, str] | None = None) -> Any:
    """Import ``/abs/file.py:attr`` (or ``module:attr``); refuse anything but a Starlette app, naming the path.

    langgraph.json's folders and env are put in place first, as for its graphs and auth.
    """
    project_setup(folders, env)
    try:
        module, attr = module_of_spec(spec, prefix="deerflow_http_app")
    except Exception as exc:  # any import failure is a start-up error naming the path
        raise ImproperlyConfigured(f"http.app: {spec} cannot be imported: {type(exc).__name__}: {exc}") from exc
    app = getattr(module, attr, None)
    if app is None or not callable(app) or not isinstance(getattr(app, "routes", None), list):
        kind = "nothing" if app is None else type(app).__name__
        raise ImproperlyConfigured(
            f"http.app: {spec} names {kind}, not a Starlette or FastAPI app (its routes decide what it serves)"
        )
    return app


@dataclass
class CustomApp:
    """The project's app, its dispatch rule, its lifespan and its optional authentication."""

    app: Any
    spec: str
    authenticate: bool = False
    _lifespan: asyncio.Task | None = field(default=None, repr=False)
    _to_app: asyncio.Queue | None = field(default=None, repr=False)
    _from_app: asyncio.Queue | None = field(default=None, repr=False)

    def around(self, inner: ASGIApp, *, auth_first: bool = False) -> ASGIApp:
        """``inner`` (our routes) inside the project's own middleware, as the Platform runs it on every route.

        ``auth_first`` (``http.middleware_order``): the caller is identified
        before that middleware runs, so it finds ``request.user`` and
        ``request.auth``; by default (``middleware_first``) it runs first and
        authentication happens in our views. The project's own routes get its
        middleware from its app, once.
        """
        stack = inner
        for cls, args, kwargs in reversed(getattr(self.app, "user_middleware", [])):
            stack = cls(stack, *args, **kwargs)
        return _identified(stack) if auth_first else stack

    def serves(self, scope: Scope) -> bool:
        """Whether one of the project's routes matches this request (path, and method for HTTP)."""
        for route in self.app.routes:
            match, _ = route.matches(scope)
            if match.value:  # Starlette's Match: NONE 0, PARTIAL 1 (the path, not the method), FULL 2
                return True
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.authenticate:
            from deerflow_site import custom_auth  # the top floor's auth; only on a project that asks for it

            custom = custom_auth.active()
            if custom is not None:
                try:
                    found = await asyncio.to_thread(_identify, custom_auth, custom, scope)
                except custom_auth.AuthenticationError as exc:
                    return await _refuse(scope, send, exc.status, exc.detail)
                scope = {**scope, "user": {**found.user, "permissions": list(found.permissions)}}
        await self.app(scope, receive, send)

    # -- lifespan ---------------------------------------------------------------------------

    async def startup(self) -> None:
        """Run the app's lifespan up to its startup; a failure stops ours, naming the app."""
        self._to_app, self._from_app = asyncio.Queue(), asyncio.Queue()
        self._lifespan = asyncio.get_running_loop().create_task(self._run_lifespan(), name="http.app lifespan")
        await self._to_app.put({"type": "lifespan.startup"})
        answer = await self._from_app.get()
        if answer["type"] == "lifespan.startup.failed":
            raise RuntimeError(f"http.app {self.spec}: its startup failed: {answer.get('message', '')}")

    async def shutdown(self) -> None:
        if self._lifespan is None or self._to_app is None or self._from_app is None:
            return
        if not self._lifespan.done():
            await self._to_app.put({"type": "lifespan.shutdown"})
            await self._from_app.get()
        await self._lifespan
        self._lifespan = None

    async def _run_lifespan(self) -> None:
        assert self._to_app is not None and self._from_app is not None
        to_app, from_app = self._to_app, self._from_app
        try:
            await self.app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, to_app.get, from_app.put)
        except Exception:  # an app without lifespan support raises on the scope: it has nothing to start
            logger.debug("http.app %s: no lifespan", self.spec, exc_info=True)
            await from_app.put({"type": "lifespan.startup.complete"})
            await from_app.put({"type": "lifespan.shutdown.complete"})


def _identified(inner: ASGIApp) -> ASGIApp:
    """Put the caller in ``scope["user"]`` and ``scope["auth"]`` (Starlette's) before ``inner`` runs.

    Nobody is refused here: a caller who is not identified is an anonymous
    user, and our views answer 401 where a route needs one (public routes
    such as /api/ok stay public).
    """

    async def identified(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and "user" not in scope:
            scope = {**scope, **await _scope_identity(scope)}
        await inner(scope, receive, send)

    return identified


async def _scope_identity(scope: Scope) -> dict[str, Any]:
    from channels.db import database_sync_to_async  # closes the thread's connection, as every ORM hop here
    from starlette.authentication import AuthCredentials  # the app is a Starlette app: its package is installed

    from deerflow_site import auth, custom_auth  # the top floor's identities; only for auth_first

    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
    if (custom := custom_auth.active()) is not None:
        try:
            found = await asyncio.to_thread(_identify, custom_auth, custom, scope)
        except custom_auth.AuthenticationError:
            found = None
        if found is not None:
            permissions = list(found.permissions)
            user = AuthUser({**found.user, "permissions": permissions})
            return {"user": user, "auth": AuthCredentials(permissions), custom_auth.SCOPE_IDENTITY: found}
    elif (raw := auth.raw_key_from_headers(headers)) is not None:
        owner = await database_sync_to_async(auth.user_for_api_key)(raw)
        if owner is not None:
            name = owner.get_username()
            data = {"identity": name, "display_name": name, "is_authenticated": True, "permissions": []}
            return {"user": AuthUser(data), "auth": AuthCredentials([])}
    nobody = {"identity": "", "display_name": "", "is_authenticated": False, "permissions": []}
    return {"user": AuthUser(nobody), "auth": AuthCredentials([])}


def _identify(custom_auth, custom, scope: Scope):
    request = None
    if "request" in custom.params and scope["type"] == "http":
        from starlette.requests import Request  # the app is a Starlette app: its package is installed

        request = Request(scope)
    arguments = custom_auth.asgi_arguments(custom, scope, {}, request=request)
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
    return custom_auth.identify(custom, arguments, cache_key=custom_auth.cache_key(custom, headers.get))


async def _refuse(scope: Scope, send: Send, status: int, detail: str) -> None:
    if scope["type"] != "http":
        await send({"type": "websocket.close", "code": 4401 if status == 401 else 4403})
        return
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
