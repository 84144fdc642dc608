"""Errors of the checkpoint layer: kinds of the one domain error family (``core.errors``).

Each keeps the standard base callers caught before the family existed
(``RuntimeError``, ``LookupError``); the interfaces translate them by kind.
"""

from core.errors import Conflict, NotFound, Unavailable


class CheckpointModeMismatchError(Conflict, RuntimeError):
    """A full-mode process met a delta thread; nothing partial was read or written (409)."""

    # DeerFlow's sentence, then the command that does what it asks.
    MESSAGE = (
        "Thread requires delta mode; materialize and convert its checkpoints before using full mode. "
        "Run: manage.py convert_checkpoints --to full --thread <id>"
    )

    def __init__(self, message: str = MESSAGE) -> None:
        super().__init__(message)

    def detail(self, *, thread_id: str | None = None) -> str:
        # DeerFlow's answer names the thread: "Thread <id>: Thread requires delta mode; …"; so does the command.
        return f"Thread {thread_id}: {str(self).replace('<id>', thread_id)}" if thread_id else str(self)


class CheckpointModeReconfigurationError(Unavailable, RuntimeError):
    """The process was asked to change a restart-required setting (503)."""


class CheckpointNotFoundError(NotFound, LookupError):
    """A checkpoint id named by a client does not exist on the thread (404)."""

    def __init__(self, checkpoint_id: str) -> None:
        super().__init__(f"Checkpoint {checkpoint_id} not found")
        self.checkpoint_id = checkpoint_id


class UnknownGraphError(NotFound, LookupError):
    """No registered graph answers to an assistant id or graph name (404)."""

    def __init__(self, assistant_id: str) -> None:
        super().__init__(f"Assistant {assistant_id} not found")
        self.assistant_id = assistant_id


class GraphLoadError(RuntimeError):
    """A registered graph's import path does not give a servable graph (the cause is chained)."""

    def __init__(self, import_path: str, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.import_path = import_path
