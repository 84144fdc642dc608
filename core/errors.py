"""The domain's errors: what services and selectors raise, whatever interface called them.

Every refusal of every layer is one of these kinds (the checkpoint layer's,
the Store's and retention's errors subclass them, keeping the standard base
their callers caught before). Each interface translates them by kind, in one
place: the API to one status (``core.drf.exception_handler``), the console to
a message (``core.console_actions.service_call``), the protocol-v2 envelope to an
error code (``runs.api.commands``), a management command to its exit status.
The texts are the ones clients see, so they name the thing and what to do
about it.
"""

from __future__ import annotations


class DomainError(Exception):
    """Base of the errors a caller can act on; ``str(error)`` is the detail shown."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def detail(self, *, thread_id: str | None = None) -> str:
        """The text an interface shows; ``thread_id`` is the thread the request named, if any."""
        return self.message


class NotFound(DomainError):
    """The object does not exist, or is not the caller's (never told apart: 404)."""


class ThreadNotFound(NotFound):
    """No thread with this id is the caller's: missing or another user's, never told apart (404)."""

    def __init__(self, thread_id: str) -> None:
        super().__init__(f"Thread {thread_id} not found")
        self.thread_id = thread_id


class Conflict(DomainError):
    """The request contradicts the object's current state, e.g. a run in flight (409)."""


class Invalid(DomainError):
    """A field's value is unacceptable (422); ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.reason = message


class Forbidden(DomainError):
    """The caller may not do this (403, or the status an authorization handler chose)."""

    def __init__(self, message: str = "Forbidden", *, status: int = 403) -> None:
        super().__init__(message)
        self.status = status


class Unavailable(DomainError):
    """A dependency or capability is not available in this deployment (501/503)."""

    def __init__(self, message: str, *, status: int = 503) -> None:
        super().__init__(message)
        self.status = status
