"""Generated hostile input: schemathesis against a live server, from the server's own OpenAPI schema.

Every operation of ``/api/openapi.json`` gets ``FUZZ_EXAMPLES`` generated
requests (valid and invalid bodies, parameters and ids) with the owner's API
key, on this pass's backend. The suite fails on any 5xx, on a response whose
status the schema does not document, and on any 4xx that changed data: the
rows of every table that holds user data are counted before and after each
request. Endless streams (a thread's protocol-v2 stream and join stream) are
left out: they never end by design; their refusals are covered by the stream
tests and the isolation matrix.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from urllib.parse import urlsplit

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import status_code_conformance

from tests.live.server import LiveServer, fresh_postgres_database
from tests.live.support import DATABASE_URL

pytestmark = pytest.mark.live

FUZZ_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "12"))
ENDLESS = r"/threads/\{thread_id\}/stream(/events)?$"
# Tables whose rows a refused request must leave alone.
DATA_TABLES = (
    "threads_threadmeta",
    "runs_run",
    "runs_runevent",
    "runs_threadstreamevent",
    "runs_assistant",
    "runs_assistantversion",
    "runs_cron",
    "checkpoints",
    "writes",  # SQLite's checkpoint writes
    "checkpoint_writes",  # PostgreSQL's
    "checkpoint_blobs",
    "store",
)


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory):
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(fresh_postgres_database(DATABASE_URL)) if DATABASE_URL else None
        server = LiveServer(tmp_path_factory.mktemp("fuzz"), database_url=url).setup().start()
        stack.callback(server.stop)
        yield server


@pytest.fixture(scope="module")
def api_schema(fuzz_server):
    return schemathesis.openapi.from_url(f"{fuzz_server.url}/openapi.json").exclude(path_regex=ENDLESS)


# Runs still writing, and stateless runs (``on_completion: delete``) whose
# thread is deleted after the run ended (the deletion takes the run row along).
UNSETTLED = "SELECT count(*) FROM runs_run WHERE status IN ('queued', 'pending', 'running') OR {stateless}"
STATELESS = {
    "sqlite": "json_extract(kwargs, '$.on_completion') = 'delete'",
    "postgresql": "kwargs->>'on_completion' = 'delete'",
}


class RowCounter:
    """Counts the rows of DATA_TABLES in the server's database over one read-only connection."""

    def __init__(self, server: LiveServer) -> None:
        self.server = server
        self._stack = contextlib.ExitStack()
        self.conn = self._stack.enter_context(_connect(server))
        if server.database_url:
            listing = "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
        else:
            listing = "SELECT name FROM sqlite_master WHERE type = 'table'"
        tables = {row[0] for row in self.conn.execute(listing).fetchall()}
        self.tables = [t for t in DATA_TABLES if t in tables]
        self.unsettled = UNSETTLED.format(stateless=STATELESS["postgresql" if server.database_url else "sqlite"])

    def __call__(self) -> dict[str, int]:
        """Return the row counts once every run settled.

        Earlier cases start runs (and crons fire them) that write while they
        last, and a stateless run's thread is deleted just after it ended:
        counting only once they settled keeps their writes out of the next
        case's before-and-after.
        """
        deadline = time.monotonic() + 30
        while self.conn.execute(self.unsettled).fetchone()[0] and time.monotonic() < deadline:
            time.sleep(0.05)
        return {t: self.conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in self.tables}

    def close(self) -> None:
        self._stack.close()


@pytest.fixture(scope="module")
def row_counts(fuzz_server):
    counter = RowCounter(fuzz_server)
    yield counter
    counter.close()


@contextlib.contextmanager
def _connect(server: LiveServer):
    if server.database_url:
        import psycopg

        with psycopg.connect(server.database_url, autocommit=True) as conn:
            yield conn
        return
    path = os.path.join(server.config["database"]["sqlite_dir"], "deerflow.db")
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)) as conn:
        yield conn


def test_no_server_error_no_undocumented_status_and_no_refused_write(api_schema, fuzz_server, row_counts):
    key = fuzz_server.api_key("alice")
    failures: list[str] = []
    operations = 0
    for result in api_schema.get_all_operations():
        operation = result.ok()
        operations += 1

        @given(case=operation.as_strategy())
        @settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
        def fuzz(case):
            before = row_counts()
            response = case.call(headers={"x-api-key": key}, timeout=30)
            case.validate_response(response, checks=(not_a_server_error, status_code_conformance))
            if 400 <= response.status_code < 500:
                assert row_counts() == before, (
                    f"{case.method} {case.formatted_path} answered {response.status_code} and changed data"
                )

        try:
            fuzz()
        except (Exception, BaseExceptionGroup) as exc:  # every operation is tried; failures are reported together
            failures.append(f"{operation.label}: {_describe(exc)[:3000]}")
    assert operations > 60, "the schema lost its operations"
    assert failures == [], "\n\n".join(failures)


def _describe(exc: BaseException) -> str:
    """The failure with the sub-exceptions of a group (Hypothesis reports a flaky case as one)."""
    parts = [str(exc)]
    for sub in getattr(exc, "exceptions", ()):
        parts.append(f"  {type(sub).__name__}: {_describe(sub)}")
    return "\n".join(parts)


def test_the_fuzzed_database_is_the_one_counted(fuzz_server, row_counts):
    """row_counts must see the server's writes, or the refused-write check proves nothing."""
    import httpx

    before = row_counts()
    key = fuzz_server.api_key("alice")
    assert httpx.post(f"{fuzz_server.url}/threads", json={}, headers={"x-api-key": key}).status_code == 200
    after = row_counts()
    assert after["threads_threadmeta"] == before["threads_threadmeta"] + 1
    backend = {"writes"} if not fuzz_server.database_url else {"checkpoint_writes", "checkpoint_blobs"}
    assert set(after) == set(DATA_TABLES) - ({"writes", "checkpoint_writes", "checkpoint_blobs"} - backend)
    assert urlsplit(fuzz_server.url).hostname == "127.0.0.1"
