"""Django's middleware, called on the event loop where its hooks do no I/O.

Under ASGI, Django runs each hook of a ``MiddlewareMixin`` middleware
(``process_request``, ``process_response``) through ``sync_to_async``: a hop
to the request's thread and back, twice per middleware. Our stack made 13 of
them per request, each waiting behind whatever that thread or the GIL was
busy with; ``bench.run_costs`` measured the response half of one ``/wait``
at 7 ms on a loaded two-core machine.

The hooks below are pure header and cookie work, or lazy objects (the
session and the user load from the database only when a view reads them, as
before), so they run inline. Two of them can write: the session is saved
when a view modified it, and messages are stored when a view used them; those
``process_response`` calls still take the thread. ``CsrfViewMiddleware``'s
``process_view`` decides a CSRF-exempt view (every API view) inline and takes
the thread for the others, whose check may read a form body. (With
``CSRF_USE_SESSIONS`` the CSRF token would be a session read in
``process_request``; Django refuses that on the loop with
``SynchronousOnlyOperation``, so the setting cannot be turned on unnoticed.)
"""

from __future__ import annotations

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings
from django.contrib.auth import middleware as auth
from django.contrib.messages import middleware as messages
from django.contrib.sessions import middleware as sessions
from django.core.exceptions import MiddlewareNotUsed
from django.http import JsonResponse
from django.middleware import clickjacking, common, csrf, security

from core import custom_encryption


class _Inline:
    """Call ``process_request`` and ``process_response`` on the loop instead of a thread hop each."""

    def _response_needs_thread(self, request) -> bool:
        return False

    async def __acall__(self, request):
        response = self.process_request(request) if hasattr(self, "process_request") else None
        response = response or await self.get_response(request)
        if not hasattr(self, "process_response"):
            return response
        if self._response_needs_thread(request):
            return await sync_to_async(self.process_response, thread_sensitive=True)(request, response)
        return self.process_response(request, response)


class SecurityMiddleware(_Inline, security.SecurityMiddleware):
    pass


class CommonMiddleware(_Inline, common.CommonMiddleware):
    pass


class CsrfViewMiddleware(_Inline, csrf.CsrfViewMiddleware):
    async def process_view(self, request, callback, callback_args, callback_kwargs):
        if getattr(callback, "csrf_exempt", False):
            return None
        check = sync_to_async(super().process_view, thread_sensitive=True)
        return await check(request, callback, callback_args, callback_kwargs)


class AuthenticationMiddleware(_Inline, auth.AuthenticationMiddleware):
    pass


class XFrameOptionsMiddleware(_Inline, clickjacking.XFrameOptionsMiddleware):
    pass


class SessionMiddleware(_Inline, sessions.SessionMiddleware):
    def _response_needs_thread(self, request) -> bool:
        session = getattr(request, "session", None)
        return session is not None and (session.modified or settings.SESSION_SAVE_EVERY_REQUEST)


class MessageMiddleware(_Inline, messages.MessageMiddleware):
    def _response_needs_thread(self, request) -> bool:
        storage = getattr(request, "_messages", None)
        return storage is not None and (storage.used or storage.added_new)


class EncryptionContextMiddleware:
    """With langgraph.json's ``encryption.path``: a bad ``X-Encryption-Context`` is a 400; else the
    request's writes are sealed with its context (``core.custom_encryption``, resolved on first use)."""

    async_capable = True
    sync_capable = True

    def __init__(self, get_response) -> None:
        if (custom := custom_encryption.active()) is None or not custom.handlers:
            raise MiddlewareNotUsed  # no handlers: no context to read (LANGGRAPH_AES_JSON_KEYS takes none)
        self.get_response = get_response
        self.async_mode = iscoroutinefunction(get_response)
        if self.async_mode:
            markcoroutinefunction(self)

    def __call__(self, request):
        if self.async_mode:
            return self.__acall__(request)
        if (refused := self._refusal(request)) is not None:
            return refused
        with custom_encryption.request_scope(request):
            return self.get_response(request)

    async def __acall__(self, request):
        if (refused := self._refusal(request)) is not None:
            return refused
        with custom_encryption.request_scope(request):
            return await self.get_response(request)

    @staticmethod
    def _refusal(request) -> JsonResponse | None:
        try:
            request._encryption_header = custom_encryption.header_context(request.headers.get(custom_encryption.HEADER))
        except ValueError as exc:
            return JsonResponse({"detail": str(exc)}, status=400)
        return None
