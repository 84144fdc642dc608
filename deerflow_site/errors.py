"""The domain's errors: what services and selectors raise, whatever interface called them.

The API maps each to one status (``deerflow_site.drf.exception_handler``), the
admin to a message, a management command to its exit status. The texts are
the ones clients see, so they name the thing and what to do about it.
"""

from __future__ import annotations


class DomainError(Exception):
    """Base of the errors a caller can act on; ``str(error)`` is the detail shown."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class NotFound(DomainError):
    """The object does not exist, or is not the caller's (never told apart: 404)."""


class Conflict(DomainError):
    """The request contradicts the object's current state, e.g. a run in flight (409)."""


class Invalid(DomainError):
    """A field's value is unacceptable (422); ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.reason = message


class Unavailable(DomainError):
    """A dependency or capability is not available in this deployment (501/503)."""

    def __init__(self, message: str, *, status: int = 503) -> None:
        super().__init__(message)
        self.status = status
