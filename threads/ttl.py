"""Thread TTLs: the policy a client sets and the clock that activity restarts (the sweep: ``threads.ttl_sweep``).

A thread with a TTL expires ``ttl`` after its last activity: its creation or
the PATCH that set the TTL, the start and the end of each of its runs, and
each state update (``threads.services`` restarts the clock in the same
UPDATE that records the activity). The run workers sweep expired threads on
every poll (``threads_sweep_expired``): ``delete`` deletes the thread as
``DELETE /threads/{id}`` does, ``keep_latest`` prunes its history down to
what the head and other records still need (``threads.retention``) and
leaves it to expire again after its next activity.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import DateTimeField, ExpressionWrapper, F, Value

from checkpoints.storage import UnsupportedBackendError, require_table_backend
from core.errors import Invalid
from threads.models import ThreadMeta, TTLStrategy

logger = logging.getLogger(__name__)

# A TTL must land before year 9999 from any "now": 100 years is plenty.
TTL_MAX_MINUTES = 100 * 365 * 24 * 60
TTL_SHAPE = 'must be an object {"ttl": <minutes>, "strategy": "delete" | "keep_latest"}'


@dataclass(frozen=True)
class TTLPolicy:
    """What a client asked for: expire ``minutes`` after the last activity, then apply ``strategy``."""

    strategy: str
    minutes: float

    @property
    def duration(self) -> timedelta:
        return timedelta(minutes=self.minutes)


def ttl_policy_from(data: Any) -> TTLPolicy:
    """Return the policy in a request's ``ttl`` object; raise ``Invalid`` on anything else.

    The shape is the Platform's (the SDKs turn a bare number into
    ``{"ttl": n, "strategy": "delete"}``): minutes, fractions allowed.
    """
    if not isinstance(data, dict):
        raise Invalid("ttl", TTL_SHAPE)
    if unknown := sorted(set(data) - {"ttl", "strategy"}):
        raise Invalid("ttl", f"unknown key(s) {', '.join(map(repr, unknown))}; {TTL_SHAPE}")
    strategy = data.get("strategy")
    if strategy is None:
        strategy = TTLStrategy.DELETE
    if strategy not in TTLStrategy.values:
        raise Invalid("ttl.strategy", f"must be one of {', '.join(TTLStrategy.values)}, not {strategy!r}")
    minutes = data.get("ttl")
    if isinstance(minutes, bool) or not isinstance(minutes, (int, float)):
        raise Invalid("ttl.ttl", "must be a number of minutes")
    if not math.isfinite(minutes) or not 0 < minutes <= TTL_MAX_MINUTES:
        raise Invalid("ttl.ttl", f"must be more than 0 and at most {TTL_MAX_MINUTES} minutes (100 years)")
    return TTLPolicy(str(strategy), float(minutes))


def default_thread_ttl() -> TTLPolicy | None:
    """The deployment's TTL for a thread created without its own (langgraph.json ``checkpointer.ttl``), or None."""
    raw = settings.DEERFLOW.get("DEFAULT_THREAD_TTL")
    return ttl_policy_from(raw) if raw else None


def ttl_policy_check_supported(policy: TTLPolicy) -> None:
    """Refuse ``keep_latest`` where retention cannot run (the memory backend has no tables to prune)."""
    if policy.strategy == TTLStrategy.KEEP_LATEST:
        try:
            require_table_backend()
        except UnsupportedBackendError:
            raise Invalid("ttl.strategy", "keep_latest needs the sqlite or postgres backend") from None


def ttl_fields(policy: TTLPolicy, *, now: datetime) -> dict[str, Any]:
    """Return the ThreadMeta fields that set ``policy`` with its clock started at ``now``."""
    return {"ttl_strategy": policy.strategy, "ttl": policy.duration, "expires_at": now + policy.duration}


def ttl_restarted(now: datetime) -> ExpressionWrapper:
    """Return ``expires_at`` counted again from ``now``, for an UPDATE (NULL for a thread without a TTL)."""
    return ExpressionWrapper(Value(now, output_field=DateTimeField()) + F("ttl"), output_field=DateTimeField())


def ttl_info(thread: ThreadMeta) -> dict[str, Any] | None:
    """Return the Platform's ``ttl`` object of a thread (``GET /threads/{id}?include=ttl``); None without one."""
    if thread.ttl is None:
        return None
    return {
        "strategy": thread.ttl_strategy,
        "ttl_minutes": thread.ttl.total_seconds() / 60,
        "expires_at": thread.expires_at.isoformat() if thread.expires_at else None,
    }
