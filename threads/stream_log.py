"""A thread's protocol-v2 event log: append (numbering under the thread lock), retention and reads.

Numbers are given at write time, not when an event is produced: the thread
row lock serialises writers of one thread (runs never overlap on a thread,
but a finishing run and its successor may), and an event is published to
live subscribers only after its row committed, so a subscriber that replays
from the database and then tails the bridge never sees a number twice or
misses one (a hole in the live tail is filled from the database).

The log is the thread's; ``runs`` writes its runs' events into it from
above, and a state update writes its own.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max, Min, Q, QuerySet

from core.custom_encryption import seals_json
from core.text import json_column, storable_json
from threads.models import ThreadMeta, ThreadStreamEvent, stream_envelope

_TABLE = ThreadStreamEvent._meta.db_table
_DATA = ThreadStreamEvent._meta.get_field("data")
_LAST_SEQ = f"SELECT MAX(seq) FROM {_TABLE} WHERE thread_id = %s"
_THREAD_ROW = f"SELECT 1 FROM {ThreadMeta._meta.db_table} WHERE thread_id = %s"
_INSERT = (
    f"INSERT INTO {_TABLE} (thread_id, run_id, seq, event_id, method, namespace, data, timestamp)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
)


@dataclass
class PendingEvent:
    """A log event before the database gives it its thread-global ``seq``."""

    event_id: str
    method: str
    namespace: list[str]
    data: Any
    timestamp: int = field(default_factory=lambda: int(time.time() * 1000))


# -- writes --------------------------------------------------------------------


def thread_stream_append(
    *, thread_id: str, run_id: str, events: Sequence[PendingEvent], locked: bool = False, retry: bool = False
) -> list[dict]:
    """Append ``events`` after the thread's last ``seq``; return their wire envelopes.

    Returns nothing when the thread was deleted meanwhile. ``locked``: the
    caller's transaction already holds the thread's row lock and saw the thread.
    ``retry``: an earlier write of some of these events failed, perhaps after
    it committed (a connection lost during COMMIT): the events the log
    already holds are not written again, and their stored envelopes come
    first in the answer (they were never published).
    """
    if not events:
        return []
    with transaction.atomic(savepoint=not locked):
        last = _last_seq(thread_id) if locked else _lock_thread_last_seq(thread_id)
        if last is None:
            return []
        logged: list[dict] = []
        if retry:
            found = ThreadStreamEvent.objects.filter(
                thread_id=thread_id, run_id=run_id, event_id__in=[event.event_id for event in events]
            )
            logged = [row.envelope() for row in found.order_by("seq")]
            held = {envelope["event_id"] for envelope in logged}
            events = [event for event in events if event.event_id not in held]
        rows = [(last + offset, event, *storable_json(event.data)) for offset, event in enumerate(events, start=1)]
        if seals_json():  # langgraph.json's encryption.path: the log holds what the handlers sealed
            rows = [(seq, e, data, json_column(_DATA.sealed(data))) for seq, e, data, _text in rows]
        # Raw: Django's bulk_create spent ~4 ms a run preparing ~18 rows'
        # fields and encoding their JSON with json.dumps.
        with connection.cursor() as cursor:
            cursor.executemany(
                _INSERT,
                [
                    (thread_id, run_id, seq, e.event_id, e.method, json_column(e.namespace), text, e.timestamp)
                    for seq, e, _data, text in rows
                ],
            )
    return [
        *logged,
        *(stream_envelope(e.event_id, seq, e.method, e.namespace, e.timestamp, data) for seq, e, data, _ in rows),
    ]


def thread_stream_prune(*, thread_id: str, last_seq: int | None = None) -> int:
    """Drop the oldest events beyond ``thread_stream.max_events_per_thread`` (0 keeps all).

    ``last_seq``: the thread's newest number, when the caller just wrote it
    under the thread lock (it is not looked up again).
    """
    keep = settings.DEERFLOW_CONFIG.thread_stream.max_events_per_thread
    if not keep:
        return 0
    last = last_seq if last_seq is not None else _last_seq(thread_id)
    deleted, _ = ThreadStreamEvent.objects.filter(thread_id=thread_id, seq__lte=last - keep).delete()
    return deleted


def _last_seq(thread_id: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(_LAST_SEQ, [thread_id])
        return cursor.fetchone()[0] or 0


def _lock_thread_last_seq(thread_id: str) -> int | None:
    """Lock the thread's row and return its log's last number (0 for none); None when the thread is gone.

    Raw statements: the ORM's ``select_for_update().exists()`` compiled its
    query on every batch (12 % of a server's samples with 100 runs
    streaming, ``bench.agents``). Two of them: under PostgreSQL's READ
    COMMITTED a ``MAX`` read in the locking statement itself is the one its
    snapshot saw before the lock was granted, and two writers would take
    the same number.
    """
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""  # SQLite: the transaction is IMMEDIATE
    with connection.cursor() as cursor:
        cursor.execute(_THREAD_ROW + lock, [thread_id])
        if cursor.fetchone() is None:
            return None
    return _last_seq(thread_id)


def thread_stream_end_orphan(*, thread_id: str, run_id: str, graph_name: str, error: str) -> list[dict]:
    """Give a run that started but whose executor died its one terminal event (``failed``).

    Call inside the transaction that fails the run. Followers pick it up from
    the database at their next idle re-read.
    """
    events = ThreadStreamEvent.objects.filter(thread_id=thread_id, run_id=run_id, method="lifecycle")
    phases = {(data or {}).get("event") for ns, data in events.values_list("namespace", "data") if not ns}
    if "running" not in phases or phases & {"completed", "failed", "interrupted"}:
        return []
    data = {"event": "failed", "graph_name": graph_name, "error": error}
    terminal = PendingEvent(f"synth:{run_id}:lc||failed", "lifecycle", [], data)
    return thread_stream_append(thread_id=thread_id, run_id=run_id, events=[terminal])


# -- reads ---------------------------------------------------------------------


def _thread_log(*, thread_id: str, life: tuple[int, Any] | None) -> QuerySet[ThreadStreamEvent]:
    """Return a thread's log rows; ``life`` (owner id, thread ``created_at``): only that life of the id.

    Clients choose thread ids, so an id is deleted and created again, and its
    log starts over at seq 1 each time. The join on the thread row's primary
    key keeps a follower of one life from ever reading another's rows.
    """
    rows = ThreadStreamEvent.objects.filter(thread_id=thread_id)
    if life is not None:
        rows = rows.filter(thread__owner_id=life[0], thread__created_at=life[1])
    return rows


def thread_stream_since(
    *,
    thread_id: str,
    since: int,
    until: int | None = None,
    limit: int = 500,
    life: tuple[int, Any] | None = None,
    methods: tuple[str, ...] | None = None,
) -> list[dict]:
    """Return up to ``limit`` log envelopes with ``since < seq`` (``< until`` when given), in order.

    ``methods``: only rows of these methods (a name ending in ``.`` is a
    prefix), so a narrow subscription reads and decodes only its own rows.
    """
    rows = _thread_log(thread_id=thread_id, life=life).filter(seq__gt=since)
    if until is not None:
        rows = rows.filter(seq__lt=until)
    if methods is not None:
        exact = [m for m in methods if not m.endswith(".")]
        wanted = Q(method__in=exact)
        for prefix in (m for m in methods if m.endswith(".")):
            wanted |= Q(method__startswith=prefix)
        rows = rows.filter(wanted)
    return [row.envelope() for row in rows.order_by("seq")[:limit]]


def thread_stream_bounds(*, thread_id: str, life: tuple[int, Any] | None = None) -> tuple[int, int]:
    """Return (lowest kept seq, highest seq) of a thread's log; (0, 0) when empty."""
    bounds = _thread_log(thread_id=thread_id, life=life).aggregate(lo=Min("seq"), hi=Max("seq"))
    return bounds["lo"] or 0, bounds["hi"] or 0


def thread_stream_holds(*, thread_id: str, life: tuple[int, Any], seq: int, event_id: str) -> bool:
    """Whether this life of the thread logged ``event_id`` as ``seq`` (one read on the (thread, seq) index)."""
    return _thread_log(thread_id=thread_id, life=life).filter(seq=seq, event_id=event_id).exists()


def thread_life(*, thread_id: str, owner_id: int) -> Any | None:
    """Return the ``created_at`` of the owner's thread ``thread_id`` (which life of the id it is), or None."""
    return ThreadMeta.objects.filter(pk=thread_id, owner_id=owner_id).values_list("created_at", flat=True).first()
