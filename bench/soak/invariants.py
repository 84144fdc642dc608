"""The soak's invariants, checked once the faults are over: in the database directly, and through the API
where the state lives in serialized checkpoints.

Each check returns how many things it looked at and the violations it found
(one line each, naming the rows). None of them can pass by looking at
nothing: the report prints the counts, and the test asserts they are not zero.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field

import psycopg
from langgraph_sdk import get_client

from bench.soak.traffic import CRON_TEXT, Ledger

UNFINISHED_RUNS = "SELECT run_id, thread_id, status, worker_id, lease_expires_at FROM runs_run WHERE status = ANY(%s)"
BUSY_THREADS = "SELECT thread_id, status FROM threads_threadmeta WHERE status = 'busy'"
RUNS = "SELECT run_id, thread_id, status, started_at IS NOT NULL, kwargs FROM runs_run"
# Per thread: how many events, the lowest and highest seq, how many distinct seqs (gap-free: 1..count).
SEQ_SUMMARY = "SELECT thread_id, count(*), min(seq), max(seq), count(DISTINCT seq) FROM {table} GROUP BY thread_id"
CHECKPOINT_COUNT = "SELECT count(*) FROM checkpoints"
DANGLING_PARENTS = """
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id FROM checkpoints c
WHERE c.parent_checkpoint_id IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM checkpoints p
    WHERE p.thread_id = c.thread_id AND p.checkpoint_ns = c.checkpoint_ns AND p.checkpoint_id = c.parent_checkpoint_id
)
"""
# Per run: its root lifecycle events in the protocol log, "running" and the terminals (completed, failed, interrupted).
LIFECYCLES = """
SELECT r.run_id, r.status,
    count(e.id) FILTER (WHERE e.data->>'event' = 'running'),
    count(e.id) FILTER (WHERE e.data->>'event' IN ('completed', 'failed', 'interrupted'))
FROM runs_run r
LEFT JOIN runs_threadstreamevent e ON e.run_id = r.run_id AND e.method = 'lifecycle' AND e.namespace = '[]'::jsonb
GROUP BY r.run_id, r.status
"""
THREAD_IDS = "SELECT thread_id FROM threads_threadmeta"
CHECKPOINT_IDS = "SELECT thread_id, checkpoint_id FROM checkpoints"
UNFINISHED = ["queued", "pending", "running"]


@dataclass
class Check:
    name: str
    checked: int = 0
    violations: list[str] = field(default_factory=list)


def settle(conn: psycopg.Connection, within: float) -> tuple[float, list[tuple]]:
    """Wait until no run is queued, pending or running (leases expired, orphans failed); return the wait and what is left."""
    start = time.monotonic()
    while True:
        left = conn.execute(UNFINISHED_RUNS, [UNFINISHED]).fetchall()
        if not left or time.monotonic() - start > within:
            return time.monotonic() - start, left
        time.sleep(0.25)


def check_runs_ended(left: list[tuple], conn: psycopg.Connection) -> Check:
    check = Check("every run ended (none pending/running/queued, no thread busy)")
    check.checked = conn.execute("SELECT count(*) FROM runs_run").fetchone()[0]
    check.violations += [
        f"run {run_id} on {thread_id} still {status} (worker {worker or '-'}, lease {lease})"
        for run_id, thread_id, status, worker, lease in left
    ]
    check.violations += [
        f"thread {t} still {s} with no run unfinished" for t, s in conn.execute(BUSY_THREADS) if not left
    ]
    return check


def check_seqs(conn: psycopg.Connection, table: str, name: str) -> Check:
    check = Check(name)
    for thread_id, count, low, high, distinct in conn.execute(SEQ_SUMMARY.format(table=table)):
        check.checked += 1
        if (low, high, distinct) != (1, count, count):
            check.violations.append(
                f"{table} thread {thread_id}: {count} events, seq {low}..{high}, {distinct} distinct"
            )
    return check


def check_terminals(conn: psycopg.Connection) -> Check:
    """A run whose ``running`` reached the log ends there exactly once; none ends without it.

    A run killed before its first log flush has neither: orphan recovery gives a
    terminal event only to a run whose start followers could have seen.
    """
    check = Check("every run logged running has one terminal lifecycle event")
    for run_id, status, running, terminals in conn.execute(LIFECYCLES):
        check.checked += 1
        if running > 1 or terminals != running:
            check.violations.append(
                f"run {run_id} ({status}): {running} running, {terminals} terminal lifecycle events"
            )
    return check


def check_lineage(conn: psycopg.Connection) -> Check:
    check = Check("no checkpoint with a dangling parent")
    check.checked = conn.execute(CHECKPOINT_COUNT).fetchone()[0]
    check.violations = [
        f"checkpoint {cid} (thread {t}, ns {ns!r}) has parent {parent} that does not exist"
        for t, ns, cid, parent in conn.execute(DANGLING_PARENTS)
    ]
    return check


def check_crons(conn: psycopg.Connection, ledger: Ledger) -> Check:
    check = Check("no cron fired twice for one slot")
    slots: Counter = Counter()
    for _, thread_id, _, _, kwargs in conn.execute(RUNS):
        if kwargs.get("cron_id"):
            slots[(kwargs["cron_id"], kwargs.get("cron_slot"))] += 1
            if ledger.crons.get(kwargs["cron_id"]) != thread_id:
                check.violations.append(f"cron {kwargs['cron_id']} fired on thread {thread_id}, not its own")
    check.checked = sum(slots.values())
    check.violations += [f"cron {cron} slot {slot}: {n} runs" for (cron, slot), n in slots.items() if n > 1 or not slot]
    return check


def check_acknowledged(conn: psycopg.Connection, ledger: Ledger) -> Check:
    """Every thread, run and state-update checkpoint the service acknowledged is still there."""
    check = Check("every acknowledged write readable")
    threads = {row[0] for row in conn.execute(THREAD_IDS)}
    runs = {row[0] for row in conn.execute("SELECT run_id FROM runs_run")}
    checkpoints = set(conn.execute(CHECKPOINT_IDS).fetchall())
    for thread_id in ledger.threads:
        check.checked += 1
        if thread_id not in threads:
            check.violations.append(f"thread {thread_id} was created (200) and is gone")
    for run in ledger.runs.values():
        check.checked += 1
        if run.run_id not in runs:
            check.violations.append(f"run {run.run_id} ({run.kind}) was admitted and is gone")
    for thread_id, checkpoint_id in ledger.checkpoints:
        check.checked += 1
        if (thread_id, checkpoint_id) not in checkpoints:
            check.violations.append(f"state update checkpoint {checkpoint_id} of thread {thread_id} is gone")
    return check


def _text(kwargs: dict) -> str | None:
    messages = ((kwargs.get("input") or {}).get("messages")) or []
    return messages[0].get("content") if messages and isinstance(messages[0], dict) else None


async def _read_api(url: str, key: str, ledger: Ledger) -> tuple[dict[str, list[str]], list[str]]:
    """Each thread's final AI message texts, and the store items that do not read back as put."""
    sdk = get_client(url=url, api_key=key)
    try:
        answers = {}
        for thread_id in ledger.threads:
            state = await sdk.threads.get_state(thread_id)
            messages = (state["values"] or {}).get("messages") or []
            answers[thread_id] = [m["content"] for m in messages if m.get("type") == "ai"]
        wrong = []
        for (namespace, key_), value in ledger.store.items():
            item = await sdk.store.get_item(namespace.split("."), key=key_)
            if item is None or item["value"] != value:
                wrong.append(f"store item {namespace}/{key_} was put as {value} and reads {item and item['value']}")
        return answers, wrong
    finally:
        await sdk.http.client.aclose()


def check_answers(conn: psycopg.Connection, answers: dict[str, list[str]], ledger: Ledger) -> Check:
    """Every success run's answer is in its thread's final messages exactly once.

    Chat inputs are unique per run, so each answer must appear exactly once.
    A cron repeats one input: its thread must hold at least as many answers as
    the cron had success runs and at most as many as it had runs that started
    (one killed after its node committed leaves an answer yet ends ``error``).
    """
    check = Check("every success run's answer present exactly once")
    cron_runs: dict[str, list[str]] = {}
    for run_id, thread_id, status, started, kwargs in conn.execute(RUNS):
        if thread_id not in answers:
            continue
        if ledger.threads[thread_id] == "cron":
            cron_runs.setdefault(thread_id, []).append(status if started else "not started")
            continue
        if status != "success":
            continue
        check.checked += 1
        answer = f"echo: {_text(kwargs)}"
        found = answers[thread_id].count(answer)
        if found != 1:
            check.violations.append(f"run {run_id} on {thread_id} succeeded; its answer {answer!r} is there {found}x")
    for thread_id, statuses in cron_runs.items():
        check.checked += statuses.count("success")
        found = answers[thread_id].count(f"echo: {CRON_TEXT}")
        low, high = statuses.count("success"), len(statuses) - statuses.count("not started")
        if not low <= found <= high:
            check.violations.append(f"cron thread {thread_id}: {found} answers for {low} success / {high} started runs")
    return check


def check_all(
    conn: psycopg.Connection, url: str, key: str, ledger: Ledger, settle_seconds: float
) -> tuple[float, list[Check]]:
    """Wait for the runs to settle, then run every check; return how long the settling took and the checks."""
    waited, left = settle(conn, settle_seconds)
    answers, wrong_store = asyncio.run(_read_api(url, key, ledger))
    store = Check("every acknowledged store put reads back", len(ledger.store), wrong_store)
    checks = [
        check_runs_ended(left, conn),
        check_answers(conn, answers, ledger),
        check_seqs(conn, "runs_runevent", "run-event seq unique and gap-free per thread"),
        check_seqs(conn, "runs_threadstreamevent", "protocol-event seq unique and gap-free per thread"),
        check_terminals(conn),
        check_lineage(conn),
        check_acknowledged(conn, ledger),
        store,
        check_crons(conn, ledger),
    ]
    return waited, checks
