"""Channel modes: the process-wide freeze, the delta marker and the fail-closed gate.

``full`` keeps the whole message list in every checkpoint; ``delta`` stores
``messages`` in a LangGraph ``DeltaChannel`` (writes plus periodic snapshots).
The mode lives in the compiled graph's channel table, so a process must never
change it while running, and a full-mode process must never read a delta
thread: it would see an empty or partial message list and could write it back.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, cast

from langchain_core.runnables import RunnableConfig

from checkpoints.errors import CheckpointModeMismatchError, CheckpointModeReconfigurationError

CHANNEL_MODES: tuple[str, ...] = ("full", "delta")
DEFAULT_SNAPSHOT_FREQUENCY = 10

# Checkpoint metadata key stamped on every delta-mode write (DeerFlow's name).
DELTA_MARKER_KEY = "deerflow_checkpoint_channel_mode"
# Internal configurable key; "__" keeps LangGraph from copying it into metadata.
INTERNAL_MODE_KEY = "__deerflow_checkpoint_channel_mode"
# LangGraph's own per-channel counters, present on non-snapshot delta checkpoints.
DELTA_COUNTERS_KEY = "counters_since_delta_snapshot"
SERVER_OWNED_METADATA_KEYS = frozenset({DELTA_MARKER_KEY})

_lock = threading.Lock()
_frozen_mode: str | None = None
_frozen_frequency: int | None = None


def freeze_channel_mode(mode: str) -> str:
    """Freeze the process's channel mode; a different later value raises."""
    global _frozen_mode
    if mode not in CHANNEL_MODES:
        raise ValueError(f"checkpoint_channel_mode must be one of {CHANNEL_MODES}, got {mode!r}")
    with _lock:
        if _frozen_mode is None:
            _frozen_mode = mode
        elif _frozen_mode != mode:
            raise CheckpointModeReconfigurationError(
                "checkpoint_channel_mode is restart-required and cannot change in a running process"
            )
        return _frozen_mode


def freeze_snapshot_frequency(frequency: int) -> int:
    """Freeze the delta snapshot cadence; non-positive values raise before freezing."""
    global _frozen_frequency
    if isinstance(frequency, bool) or not isinstance(frequency, int) or frequency <= 0:
        raise ValueError("snapshot frequency must be positive")
    with _lock:
        if _frozen_frequency is None:
            _frozen_frequency = frequency
        elif _frozen_frequency != frequency:
            raise CheckpointModeReconfigurationError(
                "checkpoint_delta.snapshot_frequency is restart-required and cannot change in a running process"
            )
        return _frozen_frequency


def resolve_snapshot_frequency(explicit: int | None = None) -> int:
    """Return the cadence: an explicit value, else the frozen one, else the default."""
    if explicit is not None:
        return explicit
    return _frozen_frequency if _frozen_frequency is not None else DEFAULT_SNAPSHOT_FREQUENCY


def frozen_settings() -> tuple[str | None, int | None]:
    """Return (mode, cadence) as frozen so far, for observability."""
    return _frozen_mode, _frozen_frequency


def process_mode() -> tuple[str, int]:
    """Return the frozen (mode, cadence), freezing them from the configuration first."""
    from django.conf import settings

    database = settings.DEERFLOW_CONFIG.database
    mode = freeze_channel_mode(database.checkpoint_channel_mode)
    return mode, freeze_snapshot_frequency(database.checkpoint_delta.snapshot_frequency)


def _reset_for_tests() -> None:
    global _frozen_mode, _frozen_frequency
    with _lock:
        _frozen_mode = None
        _frozen_frequency = None


def strip_server_owned_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """Return client metadata without keys only the server may set."""
    return {k: v for k, v in (metadata or {}).items() if k not in SERVER_OWNED_METADATA_KEYS}


def inject_mode(config: Mapping[str, Any], mode: str) -> RunnableConfig:
    """Return a copy of ``config`` that stamps (delta) or strips (full) the mode marker.

    Clients cannot forge the marker: in full mode it is removed from both
    ``metadata`` and ``configurable``; the internal key is always overwritten.
    """
    configurable = {k: v for k, v in (config.get("configurable") or {}).items() if k != DELTA_MARKER_KEY}
    configurable[INTERNAL_MODE_KEY] = mode
    metadata = strip_server_owned_metadata(config.get("metadata"))
    if mode == "delta":
        metadata[DELTA_MARKER_KEY] = "delta"
    # The caller's keys pass through untouched: mypy cannot read a TypedDict out of a ** expansion.
    return cast(RunnableConfig, {**config, "configurable": configurable, "metadata": metadata})


def metadata_uses_delta(metadata: Mapping[str, Any] | None) -> bool:
    """Tell whether checkpoint metadata belongs to a delta checkpoint."""
    if not metadata:
        return False
    if metadata.get(DELTA_MARKER_KEY) == "delta":
        return True
    counters = metadata.get(DELTA_COUNTERS_KEY)
    return isinstance(counters, Mapping) and "messages" in counters


def check_metadata(metadata: Mapping[str, Any] | None, mode: str) -> None:
    """Fail closed when a full-mode process meets delta metadata; delta reads full."""
    if mode == "full" and metadata_uses_delta(metadata):
        raise CheckpointModeMismatchError()
