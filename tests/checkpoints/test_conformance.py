"""LangGraph's checkpointer conformance suite against each async saver this process builds.

``langgraph-checkpoint-conformance`` (pinned in the ``test`` extra) runs a saver
through the async checkpointer contract: the base capabilities (put,
put_writes, get_tuple, list, delete_thread) and, where the saver's class
overrides them, the extended ones (delete_for_runs, copy_thread, prune). Its
factory is entered once per capability, so each entry builds a fresh saver on
the pass's database the way ``checkpoints.runtime`` builds it (``_build_async``:
the connection or pool options, our saver class) and wraps it the way the
runtime does in each channel mode:

- ``stock``: the saver class as the runtime constructs it (CancelSafeAsyncSqliteSaver,
  PooledAsyncPostgresSaver on the runtime's pool);
- ``sealed``: the same class with ``LANGGRAPH_AES_KEY``'s serializer (on
  PostgreSQL it also moves primitive channel values into sealed blobs);
- ``full``: plus the decode memo (``install_decode_memo``), with the memo live
  (``shared_decodes()``) for the whole suite, as on a history read;
- ``delta-memory``/``delta-redis``: plus the delta-history cache wrapper
  (``with_history_cache``) on a fresh memory or Redis cache, memo live too;
- ``upstream``: LangGraph's own class on the same connection or pool, the
  baseline a failure of ours is compared with.

Each test asserts that every capability the saver claims passed, that the base
ones are among them, and that it claims exactly what the upstream class claims.
The suite's tests use fresh thread ids, so one database serves every kind.

Not covered: the sync twins (SqliteSaver, PooledPostgresSaver). The suite
drives only the async methods, which SqliteSaver overrides to raise (it then
scores NONE, https://github.com/langchain-ai/langgraph/issues/8722) and
PostgresSaver does not override (nothing detected, nothing run).
"""

from __future__ import annotations

import os
import uuid
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import BASE_CAPABILITIES, DetectedCapabilities
from langgraph.checkpoint.conformance.report import CapabilityReport, ProgressCallbacks

from checkpoints.backend import Backend
from checkpoints.decode_memo import install_decode_memo, shared_decodes
from checkpoints.encryption import Keyring, checkpoint_serde
from checkpoints.history_cache import MemoryHistoryCache, RedisHistoryCache, redis_client
from checkpoints.runtime import AsyncResources, _build_async, with_history_cache

KINDS = ["stock", "sealed", "full", "delta-memory", "delta-redis", "upstream"]
BASE = {capability.value for capability in BASE_CAPABILITIES}


def upstream_saver(resources: AsyncResources) -> BaseCheckpointSaver:
    """LangGraph's own class on the connection (SQLite) or pool (PostgreSQL) the runtime opened."""
    if resources.backend.kind == "sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        return AsyncSqliteSaver(resources.saver.conn)
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    return AsyncPostgresSaver(resources.pool)


def history_cache(kind: str, request: pytest.FixtureRequest) -> MemoryHistoryCache | RedisHistoryCache:
    """A fresh cache of the kind; Redis keys go under the test's prefix (deleted by ``redis_prefix``)."""
    if kind == "delta-memory":
        return MemoryHistoryCache(prefix=f"test-conf:{uuid.uuid4().hex[:8]}", max_entries=256)
    url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
    return RedisHistoryCache(prefix=prefix, ttl_seconds=600, aclient=redis_client(url, asynchronous=True))


@dataclass
class Outcome:
    """The suite's report, the failing tests' tracebacks, and what the upstream class claims."""

    report: CapabilityReport | None = None
    tracebacks: list[str] = field(default_factory=list)
    upstream_claims: set[str] = field(default_factory=set)

    def assert_conformant(self) -> None:
        assert self.report is not None
        results = self.report.results
        failed = [name for name, r in results.items() if r.detected and r.passed is not True]
        assert not failed, f"{failed} failed:\n" + "\n".join(self.tracebacks)
        claimed = {name for name, r in results.items() if r.detected}
        assert BASE <= claimed, f"base capabilities not claimed: {sorted(BASE - claimed)}"
        assert claimed == self.upstream_claims, f"claims {sorted(claimed)}, upstream {sorted(self.upstream_claims)}"
        assert all(results[name].tests_passed > 0 for name in claimed), self.report.to_dict()
        assert self.report.passed_all_base() and self.report.passed_all(), self.report.conformance_level()


async def run_suite(backend: Backend, kind: str, request: pytest.FixtureRequest) -> Outcome:
    """Run the suite against ``kind`` on ``backend``."""
    if kind == "delta-redis":
        request.getfixturevalue("redis_url")  # skips without REDIS_URL, before anything is built
    outcome = Outcome()

    async def factory():
        resources = await _build_async(backend)
        cache = None
        try:
            saver = resources.saver
            upstream = upstream_saver(resources)
            outcome.upstream_claims.update(c.value for c in DetectedCapabilities.from_instance(upstream).detected)
            if kind == "upstream":
                saver = upstream
            elif kind == "sealed":
                saver = type(saver)(resources.pool or saver.conn, serde=checkpoint_serde(Keyring(b"k" * 32)))
            elif kind == "full":
                saver = install_decode_memo(saver)
            elif kind.startswith("delta"):
                cache = history_cache(kind, request)
                saver = with_history_cache(install_decode_memo(saver), cache)
            await saver.setup()
            yield saver
        finally:
            if cache is not None:
                await cache.aclose()
            await resources.aclose()

    def on_test_result(capability: str, test: str, passed: bool, error: str | None) -> None:
        if not passed:
            outcome.tracebacks.append(f"[{capability}] {test}\n{error}")

    registered = checkpointer_test(name=f"{backend.kind}:{kind}")(factory)
    memo = shared_decodes() if kind in {"full", "delta-memory", "delta-redis"} else nullcontext()
    with memo:
        outcome.report = await validate(registered, progress=ProgressCallbacks(on_test_result=on_test_result))
    return outcome


@pytest.mark.sqlite_only
@pytest.mark.parametrize("kind", KINDS)
async def test_sqlite_savers_pass_the_conformance_suite(kind, request, tmp_path: Path):
    path = str(tmp_path / "conformance.db")
    outcome = await run_suite(Backend(kind="sqlite", sqlite_path=path, identity=path), kind, request)
    outcome.assert_conformant()


@pytest.fixture(scope="module")
def conformance_database():
    """A throwaway, empty PostgreSQL database next to DATABASE_URL's; dropped after the module."""
    from tests.live.server import fresh_postgres_database

    with fresh_postgres_database(os.environ["DATABASE_URL"], migrated=False) as url:
        yield url


@pytest.mark.postgres_only
@pytest.mark.parametrize("kind", KINDS)
async def test_postgres_savers_pass_the_conformance_suite(kind, request, conformance_database):
    backend = Backend(kind="postgres", conninfo=conformance_database, identity=conformance_database)
    outcome = await run_suite(backend, kind, request)
    outcome.assert_conformant()
