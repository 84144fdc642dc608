"""Build DeerFlow-shaped databases: the documented schema, rows, and real LangGraph checkpoints.

    .venv/bin/python -m bench.deerflow_source PATH --threads 200 --runs 2000 --events 20000

The tables follow DeerFlow's SQLAlchemy models as the reference describes
them (``threads_meta``, ``runs``, ``run_events``, ``feedback``, ``users``,
``alembic_version``); checkpoints are written by running a small graph with
DeerFlow's state shape (``messages`` and ``title``) over LangGraph's own
saver for the backend, in full mode (``add_messages``) or delta mode
(``DeltaChannel`` over the batch reducer, stamped with DeerFlow's marker).
The import tests build their sources with it too.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, TypedDict

import psycopg
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import StateGraph
from langgraph.graph.message import add_messages
from langgraph.pregel import Pregel
from langgraph.store.postgres import PostgresStore
from langgraph.store.sqlite import SqliteStore
from psycopg.rows import dict_row

from checkpoints.modes import inject_mode
from checkpoints.reducer import merge_message_writes

LATEST_REVISION = "0013_mcp_task_notifications"
DELTA_SNAPSHOT_FREQUENCY = 2
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)

# {json} and {ts} become each backend's JSON and timestamp types.
DDL = (
    """CREATE TABLE threads_meta (
        thread_id VARCHAR(64) PRIMARY KEY, assistant_id VARCHAR(128), user_id VARCHAR(64),
        display_name VARCHAR(256), status VARCHAR(20) DEFAULT 'idle', metadata_json {json},
        created_at {ts}, updated_at {ts})""",
    """CREATE TABLE runs (
        run_id VARCHAR(64) PRIMARY KEY, thread_id VARCHAR(64) NOT NULL, assistant_id VARCHAR(128),
        user_id VARCHAR(64), status VARCHAR(20) DEFAULT 'pending', operation_kind VARCHAR(32) NOT NULL DEFAULT 'run',
        idempotency_key VARCHAR(255), model_name VARCHAR(128), multitask_strategy VARCHAR(20) DEFAULT 'reject',
        metadata_json {json}, kwargs_json {json}, error TEXT, stop_reason VARCHAR(50),
        message_count INTEGER DEFAULT 0, first_human_message TEXT, last_ai_message TEXT,
        total_input_tokens INTEGER DEFAULT 0, total_output_tokens INTEGER DEFAULT 0, total_tokens INTEGER DEFAULT 0,
        llm_call_count INTEGER DEFAULT 0, lead_agent_tokens INTEGER DEFAULT 0, subagent_tokens INTEGER DEFAULT 0,
        middleware_tokens INTEGER DEFAULT 0, token_usage_by_model {json} DEFAULT '{{}}',
        follow_up_to_run_id VARCHAR(64), owner_worker_id VARCHAR(128), lease_expires_at {ts},
        cancel_action VARCHAR(20), cancel_requested_at {ts}, created_at {ts}, updated_at {ts})""",
    "CREATE UNIQUE INDEX uq_runs_thread_active ON runs (thread_id) WHERE status IN ('pending', 'running')",
    """CREATE TABLE run_events (
        id {serial}, thread_id VARCHAR(64) NOT NULL, run_id VARCHAR(64) NOT NULL, user_id VARCHAR(64),
        event_type VARCHAR(32), category VARCHAR(16), content TEXT, event_metadata {json},
        seq INTEGER NOT NULL, created_at {ts}, CONSTRAINT uq_events_thread_seq UNIQUE (thread_id, seq))""",
    """CREATE TABLE feedback (
        feedback_id VARCHAR(64) PRIMARY KEY, run_id VARCHAR(64) NOT NULL, thread_id VARCHAR(64) NOT NULL,
        user_id VARCHAR(64), message_id VARCHAR(64), rating INTEGER, comment TEXT, created_at {ts},
        UNIQUE (thread_id, run_id, user_id))""",
    """CREATE TABLE users (
        id VARCHAR(36) PRIMARY KEY, email VARCHAR(320) NOT NULL UNIQUE, password_hash VARCHAR(128),
        system_role VARCHAR(16) NOT NULL DEFAULT 'user', created_at {ts})""",
)
TYPES = {
    "sqlite": {"json": "JSON", "ts": "DATETIME", "serial": "INTEGER PRIMARY KEY AUTOINCREMENT"},
    "postgres": {"json": "JSONB", "ts": "TIMESTAMPTZ", "serial": "SERIAL PRIMARY KEY"},
}
COLUMNS = {
    "threads_meta": (
        "thread_id",
        "assistant_id",
        "user_id",
        "display_name",
        "status",
        "metadata_json",
        "created_at",
        "updated_at",
    ),
    "runs": (
        "run_id",
        "thread_id",
        "assistant_id",
        "user_id",
        "status",
        "operation_kind",
        "model_name",
        "multitask_strategy",
        "metadata_json",
        "kwargs_json",
        "error",
        "stop_reason",
        "message_count",
        "first_human_message",
        "last_ai_message",
        "total_input_tokens",
        "total_output_tokens",
        "total_tokens",
        "llm_call_count",
        "lead_agent_tokens",
        "subagent_tokens",
        "middleware_tokens",
        "token_usage_by_model",
        "created_at",
        "updated_at",
    ),
    "run_events": (
        "thread_id",
        "run_id",
        "user_id",
        "event_type",
        "category",
        "content",
        "event_metadata",
        "seq",
        "created_at",
    ),
    "feedback": ("feedback_id", "run_id", "thread_id", "user_id", "message_id", "rating", "comment", "created_at"),
    "users": ("id", "email", "created_at"),
}
JSON_COLUMNS = {"metadata_json", "kwargs_json", "token_usage_by_model", "event_metadata"}


class FullState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    title: str


class DeltaState(TypedDict, total=False):
    messages: Annotated[
        list[AnyMessage], DeltaChannel(merge_message_writes, snapshot_frequency=DELTA_SNAPSHOT_FREQUENCY)
    ]
    title: str


def _agent(state: dict[str, Any]) -> dict[str, Any]:
    """Answer the last human message; name the thread on its first turn, as DeerFlow's title middleware does."""
    question = state["messages"][-1].content
    update: dict[str, Any] = {"messages": [AIMessage(content=f"answer: {question}", id=str(uuid.uuid4()))]}
    if not state.get("title"):
        update["title"] = f"About {question}"[:60]
    return update


def agent_graph(saver, *, delta: bool) -> Pregel:
    builder = StateGraph(DeltaState if delta else FullState)
    builder.add_node("agent", _agent)
    builder.set_entry_point("agent")
    builder.set_finish_point("agent")
    return builder.compile(checkpointer=saver)


class DeerFlowSource:
    """A DeerFlow database being built: its connection, saver, Store and row writers."""

    def __init__(self, kind: str, connection: Any) -> None:
        self.kind = kind
        self.connection = connection
        if kind == "sqlite":
            self.saver: Any = SqliteSaver(connection)
            self.store: Any = SqliteStore(connection)
        else:
            self.saver = PostgresSaver(connection)
            self.store = PostgresStore(connection)
        self._graphs = {delta: agent_graph(self.saver, delta=delta) for delta in (False, True)}

    @classmethod
    def sqlite(cls, path: str) -> DeerFlowSource:
        connection = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        # A generated file needs no durability: without fsyncs a 10,000-turn build is ~3x faster.
        connection.execute("PRAGMA synchronous=OFF")
        return cls("sqlite", connection)

    @classmethod
    def postgres(cls, url: str) -> DeerFlowSource:
        return cls("postgres", psycopg.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row))

    def create_schema(self, *, revision: str | None = LATEST_REVISION, checkpoints: bool = True) -> None:
        """Create DeerFlow's tables (``revision`` None: a legacy-baseline database) and LangGraph's."""
        for statement in DDL:
            self.execute(statement.format(**TYPES[self.kind]))
        if revision is not None:
            self.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
            self.execute("INSERT INTO alembic_version VALUES (%s)", (revision,))
        if checkpoints:
            self.saver.setup()
            self.store.setup()

    def execute(self, sql: str, params: tuple = ()) -> None:
        if self.kind == "sqlite":
            self.connection.execute(sql.replace("%s", "?"), params)
        else:
            with self.connection.cursor() as cursor:
                cursor.execute(sql, params)

    def insert(self, table: str, rows: list[dict[str, Any]]) -> None:
        """Insert rows (missing columns NULL) in one transaction."""
        columns = COLUMNS[table]
        sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})"
        values = [tuple(self._value(c, row.get(c)) for c in columns) for row in rows]
        if self.kind == "sqlite":
            with self.connection:
                self.connection.execute("BEGIN")
                self.connection.executemany(sql.replace("%s", "?"), values)
        else:
            with self.connection.transaction(), self.connection.cursor() as cursor:
                cursor.executemany(sql, values)

    def _value(self, column: str, value: Any) -> Any:
        if column in JSON_COLUMNS and value is not None:
            return json.dumps(value)
        if isinstance(value, datetime) and self.kind == "sqlite":
            # SQLAlchemy's SQLite DateTime: naive UTC text.
            return value.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ")
        return value

    def turn(self, thread_id: str, text: str, *, delta: bool = False, checkpoint_id: str | None = None) -> dict:
        """Run one turn of the agent on the thread (from ``checkpoint_id`` when given: a fork)."""
        configurable = {"thread_id": thread_id, **({"checkpoint_id": checkpoint_id} if checkpoint_id else {})}
        config = inject_mode({"configurable": configurable}, "delta" if delta else "full")
        return self._graphs[delta].invoke({"messages": [HumanMessage(content=text, id=str(uuid.uuid4()))]}, config)

    def close(self) -> None:
        self.connection.close()


def _at(seconds: float) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


def generate(source: DeerFlowSource, *, threads: int, runs: int, events: int, users: int = 10) -> None:
    """Fill a fresh source: ``threads`` threads, ``runs`` runs (one checkpointed turn each), ``events`` events."""
    source.create_schema()
    source.insert(
        "users", [{"id": f"u{i}", "email": f"user{i}@example.com", "created_at": EPOCH} for i in range(users)]
    )
    runs_per_thread, events_per_run = max(runs // threads, 1), max(events // max(runs, 1), 1)
    for t in range(threads):
        thread_id, owner = f"t{t:06d}", f"u{t % users}"
        thread_runs, thread_events = [], []
        for r in range(runs_per_thread):
            run_id, text = f"r{t:06d}-{r:03d}", f"question {r} of thread {t}"
            source.turn(thread_id, text)
            thread_runs.append(_run_row(run_id, thread_id, owner, text, _at(t * 1000 + r * 10)))
            for e in range(events_per_run):
                seq = r * events_per_run + e + 1
                thread_events.append(_event_row(thread_id, run_id, owner, seq, e, _at(t * 1000 + r * 10 + e / 100)))
        source.insert("threads_meta", [_thread_row(thread_id, owner, _at(t * 1000))])
        source.insert("runs", thread_runs)
        source.insert("run_events", thread_events)


def _thread_row(thread_id: str, owner: str | None, created: datetime, **extra: Any) -> dict[str, Any]:
    return {
        "thread_id": thread_id, "assistant_id": "lead_agent", "user_id": owner, "display_name": f"Thread {thread_id}",
        "status": "idle", "metadata_json": {"deerflow_pinned": False}, "created_at": created,
        "updated_at": created + timedelta(minutes=5), **extra,
    }  # fmt: skip


def _run_row(run_id: str, thread_id: str, owner: str | None, text: str, created: datetime, **extra) -> dict[str, Any]:
    return {
        "run_id": run_id, "thread_id": thread_id, "assistant_id": "lead_agent", "user_id": owner,
        "status": "success", "operation_kind": "run", "model_name": "gpt-test", "metadata_json": {}, "kwargs_json": {"input": text},
        "message_count": 2, "first_human_message": text, "last_ai_message": f"answer: {text}",
        "total_input_tokens": 12, "total_output_tokens": 30, "total_tokens": 42, "llm_call_count": 2,
        "lead_agent_tokens": 30, "subagent_tokens": 10, "middleware_tokens": 2,
        "token_usage_by_model": {"gpt-test": {"input_tokens": 12, "output_tokens": 30, "total_tokens": 42}},
        "created_at": created, "updated_at": created + timedelta(seconds=3), **extra,
    }  # fmt: skip


EVENT_KINDS = (
    ("run.start", "trace"),
    ("llm.human.input", "message"),
    ("llm.ai.response", "message"),
    ("run.end", "outputs"),
)


def _event_row(thread_id: str, run_id: str, owner: str | None, seq: int, index: int, at: datetime) -> dict[str, Any]:
    event_type, category = EVENT_KINDS[index % len(EVENT_KINDS)]
    structured = category == "message"
    content = json.dumps({"type": "ai", "content": f"event {seq}"}) if structured else f"event {seq}"
    metadata = {"content_is_dict": True} if structured else {}
    return {
        "thread_id": thread_id, "run_id": run_id, "user_id": owner, "event_type": event_type,
        "category": category, "content": content, "event_metadata": metadata, "seq": seq, "created_at": at,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="The SQLite file to create (must not exist).")
    parser.add_argument("--threads", type=int, default=200)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--events", type=int, default=20000)
    args = parser.parse_args()
    started = time.perf_counter()
    source = DeerFlowSource.sqlite(args.path)
    generate(source, threads=args.threads, runs=args.runs, events=args.events)
    source.close()
    print(f"built {args.path} in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
