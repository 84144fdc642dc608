"""Errors of the checkpoint layer; the API maps each to one HTTP status."""


class CheckpointModeMismatchError(RuntimeError):
    """A full-mode process met a delta thread; nothing partial was read or written (409)."""

    MESSAGE = "Thread requires delta mode; materialize and convert its checkpoints before using full mode."

    def __init__(self, message: str = MESSAGE) -> None:
        super().__init__(message)


class CheckpointModeReconfigurationError(RuntimeError):
    """The process was asked to change a restart-required setting (503)."""


class CheckpointNotFoundError(LookupError):
    """A checkpoint id named by a client does not exist on the thread (404)."""

    def __init__(self, checkpoint_id: str) -> None:
        super().__init__(f"Checkpoint {checkpoint_id} not found")
        self.checkpoint_id = checkpoint_id


class UnknownGraphError(LookupError):
    """No registered graph answers to an assistant id or graph name (404)."""

    def __init__(self, assistant_id: str) -> None:
        super().__init__(f"Assistant {assistant_id} not found")
        self.assistant_id = assistant_id


class GraphLoadError(RuntimeError):
    """A registered graph's import path does not give a servable graph (the cause is chained)."""

    def __init__(self, import_path: str, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.import_path = import_path
