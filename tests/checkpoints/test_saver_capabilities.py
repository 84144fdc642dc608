"""The delta-mode saver claims exactly the saver API of the saver it wraps.

LangGraph's checkpointer conformance suite (``langgraph-checkpoint-conformance``,
``capabilities.py``) detects a saver's optional capabilities (``delete_for_runs``,
``copy_thread``, ``prune``, ``delta_channel_history``) by checking which
``BaseCheckpointSaver`` methods the saver's class overrides, and then calls
them. ``overridden`` applies that rule to every method of the saver API,
sync and async twins alike, to each saver this process builds: the memory
saver, and the pass's database saver (SQLite or PostgreSQL), sync and async.
"""

from __future__ import annotations

import uuid

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

from checkpoints.cached_saver import CachedHistorySaver
from checkpoints.history_cache import MemoryHistoryCache
from checkpoints.runtime import aclose_async_resources, async_resources, sync_resources, with_history_cache
from tests.checkpoints.support import new_thread_id

pytestmark = pytest.mark.django_db(transaction=True)

# ``with_allowlist`` is plumbing, not a capability: the wrapper re-wraps the allowlisted inner saver.
SAVER_API = sorted(
    name
    for name, value in vars(BaseCheckpointSaver).items()
    if not name.startswith("_") and name != "with_allowlist" and (callable(value) or isinstance(value, property))
)
OPTIONAL = ("delete_for_runs", "copy_thread", "prune")


def overridden(saver: BaseCheckpointSaver) -> set[str]:
    """Return the saver-API methods ``saver``'s class overrides (the conformance suite's detection)."""
    return {name for name in SAVER_API if getattr(type(saver), name) is not getattr(BaseCheckpointSaver, name)}


def cache() -> MemoryHistoryCache:
    return MemoryHistoryCache(prefix=f"test-caps:{uuid.uuid4().hex[:8]}", max_entries=64)


@pytest.fixture(params=["memory", "sync", "async"])
async def stock_saver(request):
    """Each saver kind the runtime builds, unwrapped (the process is frozen full)."""
    if request.param == "memory":
        yield InMemorySaver()
    elif request.param == "sync":
        yield sync_resources().saver
    else:
        yield (await async_resources()).saver
        await aclose_async_resources()


def test_the_api_under_test_covers_the_optional_capabilities():
    for name in OPTIONAL:
        assert {name, f"a{name}"} <= set(SAVER_API)
    assert {"get_delta_channel_history", "aget_delta_channel_history", "put_writes", "aput_writes"} <= set(SAVER_API)


async def test_the_delta_saver_claims_what_the_stock_saver_implements(stock_saver):
    wrapped = with_history_cache(stock_saver, cache())
    assert isinstance(wrapped, CachedHistorySaver)
    assert overridden(wrapped) == overridden(stock_saver)


async def test_a_capability_the_wrapped_saver_lacks_raises_as_the_stock_saver_does(stock_saver):
    wrapped = with_history_cache(stock_saver, cache())
    for name in OPTIONAL:
        for method in (name, f"a{name}"):
            if method in overridden(stock_saver):
                continue
            args = (["run"],) if name == "delete_for_runs" else ("a", "b") if name == "copy_thread" else (["t"],)
            with pytest.raises(NotImplementedError):
                result = getattr(wrapped, method)(*args)
                if method.startswith("a"):
                    await result


def test_the_class_follows_the_inner_saver_through_with_allowlist():
    wrapped = CachedHistorySaver(InMemorySaver(), cache())
    allowlisted = wrapped.with_allowlist([("tests.checkpoints.support", "NoopState")])
    assert overridden(allowlisted) == overridden(InMemorySaver())


@pytest.mark.postgres_only
async def test_prune_through_the_delta_saver_prunes_and_purges_the_thread():
    """AsyncPostgresSaver implements aprune: the wrapper claims it and keeps it working, cache purge included."""
    from langgraph.checkpoint.base import empty_checkpoint

    from checkpoints.accessor import thread_config

    resources = await async_resources()
    try:
        history = cache()
        wrapped = with_history_cache(resources.saver, history)
        assert "aprune" in overridden(wrapped)
        thread_id = new_thread_id("prune")
        config = thread_config(thread_id)
        for _ in range(3):
            config = await wrapped.aput(config, empty_checkpoint(), {"source": "loop", "step": 0}, {})
        history.set_many(thread_id, {f"{history.prefix}:{thread_id}:x": b"entry"})
        await wrapped.aprune([thread_id])
        assert len([c async for c in wrapped.alist(thread_config(thread_id))]) == 1
        assert history.get_many([f"{history.prefix}:{thread_id}:x"]) == [None]
    finally:
        await aclose_async_resources()
