"""CORS for browser frontends on another origin (``cors:`` in config.yaml, or langgraph.json's ``http.cors``).

Only ``/api/`` takes part; the admin never answers another origin. A
preflight (``OPTIONS`` with ``Access-Control-Request-Method``) from an
allowed origin is answered here, before authentication, since browsers send
it without the API key; a disallowed method or header is a ``400`` naming
it. Any other request passes through and, from an allowed origin, gets
``Access-Control-Allow-Origin`` (the origin itself, never ``*``, so
``allow_credentials`` keeps working) and the exposed headers. An origin
that is not allowed gets no CORS header at all: its page cannot read the
answer, and its preflight is a ``403`` naming the setting that would allow
it (CORS off included). Left to the view, it was a ``401``, and a frontend
such as the Agent Chat UI told its user to check the API key. The refusal
is logged once per origin (a warning, so the server's log says it too).
"""

from __future__ import annotations

import logging

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.utils.cache import patch_vary_headers

API_PREFIX = "/api/"
# Origins whose refused preflight this process has logged. Capped: every
# origin a client makes up would otherwise grow it and the log without bound.
_LOGGED_REFUSALS: set[str] = set()
_LOGGED_REFUSALS_MAX = 1000

logger = logging.getLogger(__name__)


def _policy():
    return settings.DEERFLOW["CORS"]


def _listed(values: list[str]) -> str:
    return ", ".join(values)


def _preflight_problem(policy, request) -> str | None:
    method = request.headers["Access-Control-Request-Method"].strip().upper()
    if "*" not in policy.allow_methods and method not in {*policy.allow_methods, "OPTIONS"}:
        return f"CORS preflight: method {method} is not allowed (allow_methods: {_listed(policy.allow_methods)})"
    if "*" in policy.allow_headers:
        return None
    allowed = {h.lower() for h in policy.allow_headers}
    asked = [h.strip().lower() for h in request.headers.get("Access-Control-Request-Headers", "").split(",")]
    if refused := [h for h in asked if h and h not in allowed]:
        return f"CORS preflight: header(s) {', '.join(refused)} not allowed (allow_headers: {_listed(sorted(allowed))})"
    return None


def _preflight(policy, request, origin: str) -> HttpResponse:
    response: HttpResponse
    if problem := _preflight_problem(policy, request):
        response = JsonResponse({"detail": problem}, status=400)
    else:
        response = HttpResponse(status=200)
        asked_method = request.headers["Access-Control-Request-Method"].strip().upper()
        methods = [asked_method] if "*" in policy.allow_methods else policy.allow_methods
        response["Access-Control-Allow-Methods"] = _listed(methods)
        asked_headers = request.headers.get("Access-Control-Request-Headers", "")
        headers = asked_headers if "*" in policy.allow_headers else _listed(policy.allow_headers)
        if headers:
            response["Access-Control-Allow-Headers"] = headers
        response["Access-Control-Max-Age"] = str(policy.max_age)
    _allow(policy, response, origin)
    return response


def _refused_preflight(request, origin: str) -> HttpResponse:
    """Answer a preflight from an origin that is not allowed: 403 saying which setting allows it."""
    advice = "add it to cors.allow_origins in config.yaml (or match it with cors.allow_origin_regex)"
    if origin not in _LOGGED_REFUSALS and len(_LOGGED_REFUSALS) < _LOGGED_REFUSALS_MAX:
        _LOGGED_REFUSALS.add(origin)
        logger.warning("refused a CORS preflight from %s (%s %s): %s", origin, request.method, request.path, advice)
    response = JsonResponse(
        {"detail": f"CORS: origin {origin} is not allowed to call this server; {advice}"}, status=403
    )
    patch_vary_headers(response, ("Origin",))
    return response


def _allow(policy, response, origin: str) -> None:
    response["Access-Control-Allow-Origin"] = origin
    if policy.allow_credentials:
        response["Access-Control-Allow-Credentials"] = "true"


class CorsMiddleware:
    """Answer preflights and add the CORS headers for allowed origins on ``/api/``.

    Sync and async natively: it touches no database, so under ASGI it costs
    no thread hop (Django's ``MiddlewareMixin`` would hop twice per request).
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request):
        if self.is_async:
            return self.__acall__(request)
        return self.process_request(request) or self.process_response(request, self.get_response(request))

    async def __acall__(self, request):
        if (early := self.process_request(request)) is not None:
            return early
        return self.process_response(request, await self.get_response(request))

    def process_request(self, request):
        origin = request.headers.get("Origin")
        if not origin or not request.path.startswith(API_PREFIX):
            return None
        if request.method != "OPTIONS" or "Access-Control-Request-Method" not in request.headers:
            return None
        policy = _policy()
        if not (policy.enabled and policy.allows_origin(origin)):
            return _refused_preflight(request, origin)
        response = _preflight(policy, request, origin)
        patch_vary_headers(response, ("Origin",))
        return response

    def process_response(self, request, response):
        policy = _policy()
        if not policy.enabled or not request.path.startswith(API_PREFIX):
            return response
        # The answer depends on Origin whenever CORS is on: caches must not mix them up.
        patch_vary_headers(response, ("Origin",))
        origin = request.headers.get("Origin")
        if origin and policy.allows_origin(origin) and "Access-Control-Allow-Origin" not in response:
            _allow(policy, response, origin)
            if policy.expose_headers:
                response["Access-Control-Expose-Headers"] = _listed(policy.expose_headers)
        return response
