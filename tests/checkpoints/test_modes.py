"""Mode freeze, delta marker, detection and the fail-closed gate (DeerFlow's test_checkpoint_mode.py).

Real savers only: delta threads are written by a real delta-mode graph on the
pass's database, then read by a full-mode accessor.
"""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage
from langgraph.channels.delta import DeltaChannel

from checkpoints import modes
from checkpoints.accessor import StateAccessor, state_accessor, thread_config
from checkpoints.cached_saver import CachedHistorySaver
from checkpoints.checks import check_channel_mode
from checkpoints.errors import CheckpointModeMismatchError, CheckpointModeReconfigurationError
from checkpoints.graphs import resolve_graph
from checkpoints.modes import (
    DELTA_COUNTERS_KEY,
    DELTA_MARKER_KEY,
    INTERNAL_MODE_KEY,
    check_metadata,
    inject_mode,
    metadata_uses_delta,
)
from checkpoints.runtime import aclose_async_resources, async_resources, close_sync_resources, sync_resources
from tests.checkpoints.conftest import configure
from tests.checkpoints.support import (
    NOOP_SPEC,
    OWN_DELTA_SPEC,
    accessor,
    checkpoint_tuples,
    head_metadata,
    invoke,
    new_thread_id,
)

pytestmark = pytest.mark.django_db(transaction=True)

MISMATCH = "Thread requires delta mode; materialize and convert its checkpoints before using full mode."


# -- freeze ----------------------------------------------------------------------


def test_process_mode_change_requires_restart(unfrozen_mode):
    assert modes.freeze_channel_mode("full") == "full"
    assert modes.freeze_channel_mode("full") == "full"
    with pytest.raises(CheckpointModeReconfigurationError, match="restart-required"):
        modes.freeze_channel_mode("delta")
    assert modes.frozen_settings()[0] == "full"


def test_process_snapshot_frequency_change_requires_restart(unfrozen_mode):
    assert modes.freeze_snapshot_frequency(250) == 250
    assert modes.freeze_snapshot_frequency(250) == 250
    with pytest.raises(CheckpointModeReconfigurationError, match="restart-required"):
        modes.freeze_snapshot_frequency(500)
    assert modes.frozen_settings()[1] == 250


@pytest.mark.parametrize("bad", [0, -1, True, 2.5])
def test_process_snapshot_frequency_must_be_positive(unfrozen_mode, bad):
    with pytest.raises(ValueError, match="^snapshot frequency must be positive$"):
        modes.freeze_snapshot_frequency(bad)
    assert modes.frozen_settings() == (None, None)


def test_unknown_mode_is_refused_and_nothing_is_frozen(unfrozen_mode):
    with pytest.raises(ValueError, match="checkpoint_channel_mode"):
        modes.freeze_channel_mode("partial")
    assert modes.frozen_settings() == (None, None)


def test_resolve_snapshot_frequency_prefers_explicit_then_frozen_then_default(unfrozen_mode):
    assert modes.resolve_snapshot_frequency() == 10
    assert modes.resolve_snapshot_frequency(100) == 100
    modes.freeze_snapshot_frequency(250)
    assert modes.resolve_snapshot_frequency() == 250
    assert modes.resolve_snapshot_frequency(100) == 100


# -- marker ----------------------------------------------------------------------


def test_inject_delta_mode_sets_internal_key_and_metadata_marker():
    config = inject_mode({"configurable": {"thread_id": "t"}, "metadata": {"k": 1}}, "delta")
    assert config["configurable"][INTERNAL_MODE_KEY] == "delta"
    assert config["metadata"] == {"k": 1, DELTA_MARKER_KEY: "delta"}


def test_inject_full_mode_does_not_claim_delta_metadata():
    config = inject_mode({"configurable": {"thread_id": "t"}}, "full")
    assert config["configurable"][INTERNAL_MODE_KEY] == "full"
    assert DELTA_MARKER_KEY not in config["metadata"]


def test_detection_by_marker_or_langgraph_counters():
    assert metadata_uses_delta({DELTA_MARKER_KEY: "delta"})
    assert metadata_uses_delta({DELTA_COUNTERS_KEY: {"messages": [1, 1]}})
    assert not metadata_uses_delta({DELTA_COUNTERS_KEY: {"other": [1, 1]}})
    assert not metadata_uses_delta({DELTA_MARKER_KEY: "full"})
    assert not metadata_uses_delta(None)
    with pytest.raises(CheckpointModeMismatchError, match=MISMATCH):
        check_metadata({DELTA_MARKER_KEY: "delta"}, "full")
    check_metadata({DELTA_MARKER_KEY: "delta"}, "delta")


def test_direct_request_cannot_select_delta_in_full_process(db_saver):
    """A client smuggling the internal key and the marker still writes a plain full checkpoint."""
    smuggled = {
        "configurable": {"thread_id": new_thread_id("smuggle"), INTERNAL_MODE_KEY: "delta", DELTA_MARKER_KEY: "delta"},
        "metadata": {DELTA_MARKER_KEY: "delta"},
    }
    config = inject_mode(smuggled, "full")
    assert config["configurable"][INTERNAL_MODE_KEY] == "full"
    assert DELTA_MARKER_KEY not in config["configurable"] and DELTA_MARKER_KEY not in config["metadata"]
    full = accessor("full", saver=db_saver)
    full.graph.invoke({"messages": [HumanMessage(content="hi")]}, config)
    thread_id = smuggled["configurable"]["thread_id"]
    assert all(not metadata_uses_delta(t.metadata) for t in checkpoint_tuples(db_saver, thread_id))
    assert [m.content for m in full.get(thread_id).values["messages"]] == ["hi", "echo: hi"]


# -- gate --------------------------------------------------------------------------


def test_every_delta_write_is_marked_and_full_writes_are_not(db_saver):
    delta_thread, full_thread = new_thread_id("marked"), new_thread_id("plain")
    invoke(accessor("delta", saver=db_saver), delta_thread, "one", "two")
    invoke(accessor("full", saver=db_saver), full_thread, "one", "two")
    assert all(t.metadata.get(DELTA_MARKER_KEY) == "delta" for t in checkpoint_tuples(db_saver, delta_thread))
    assert all(DELTA_MARKER_KEY not in t.metadata for t in checkpoint_tuples(db_saver, full_thread))


def test_sync_full_mode_rejects_delta_marker_before_writing(db_saver):
    thread_id = new_thread_id("gate")
    invoke(accessor("delta", saver=db_saver), thread_id, "one")
    assert head_metadata(db_saver, thread_id)[DELTA_MARKER_KEY] == "delta"
    before = len(checkpoint_tuples(db_saver, thread_id))
    full = accessor("full", saver=db_saver)
    with pytest.raises(CheckpointModeMismatchError, match=MISMATCH):
        full.update(thread_id, {"title": "x"})
    with pytest.raises(CheckpointModeMismatchError):
        full.update(thread_id, None, as_node="__copy__")
    with pytest.raises(CheckpointModeMismatchError):
        full.head_tuple(thread_id)
    assert len(checkpoint_tuples(db_saver, thread_id)) == before


async def test_async_full_mode_rejects_langgraph_delta_counters(transactional_db):
    """A checkpoint with LangGraph's delta counters but no marker is still delta."""
    thread_id = new_thread_id("counters")
    try:
        resources = await async_resources()
        # Cadence 100 keeps the head a non-snapshot checkpoint, which carries the counters;
        # a plain config (no inject_mode) writes no marker.
        delta = StateAccessor(resolve_graph("lead_agent"), "delta", 100, saver=resources.saver, store=resources.store)
        await delta.graph.ainvoke({"messages": [HumanMessage(content="one")]}, thread_config(thread_id))
        head = await resources.saver.aget_tuple(thread_config(thread_id))
        assert DELTA_MARKER_KEY not in head.metadata
        assert "messages" in head.metadata[DELTA_COUNTERS_KEY]
        before = [t async for t in resources.saver.alist(thread_config(thread_id))]
        full = StateAccessor(resolve_graph("lead_agent"), "full", 100, saver=resources.saver, store=resources.store)
        with pytest.raises(CheckpointModeMismatchError, match=MISMATCH):
            await full.aupdate(thread_id, {"title": "x"})
        with pytest.raises(CheckpointModeMismatchError):
            await full.aget(thread_id)
        with pytest.raises(CheckpointModeMismatchError):
            await full.ahead_tuple(thread_id)
        after = [t async for t in resources.saver.alist(thread_config(thread_id))]
        assert len(after) == len(before)
    finally:
        await aclose_async_resources()


def test_delta_mode_accepts_plain_full_checkpoint(db_saver):
    thread_id = new_thread_id("migrate")
    invoke(accessor("full", saver=db_saver), thread_id, "one")
    delta = accessor("delta", saver=db_saver)
    assert [m.content for m in delta.get(thread_id).values["messages"]] == ["one", "echo: one"]
    delta.update(thread_id, {"title": "renamed"})
    assert delta.get(thread_id).values["title"] == "renamed"
    assert head_metadata(db_saver, thread_id)[DELTA_MARKER_KEY] == "delta"


def test_full_mode_accessor_rejects_real_delta_checkpoint_sync(db_saver):
    thread_id = new_thread_id("reject")
    invoke(accessor("delta", saver=db_saver), thread_id, "one", "two")
    full = accessor("full", saver=db_saver)
    older = checkpoint_tuples(db_saver, thread_id)[2].config["configurable"]["checkpoint_id"]
    for read in (
        lambda: full.get(thread_id),
        lambda: full.get(thread_id, checkpoint_id=older),
        lambda: full.history(thread_id, limit=10),
        lambda: full.history(thread_id, limit=None),
        lambda: full.update(thread_id, {"messages": []}),
        lambda: full.update(thread_id, {"title": "x"}, checkpoint_id=older),
    ):
        with pytest.raises(CheckpointModeMismatchError, match=MISMATCH):
            read()


def test_a_graph_whose_author_compiled_a_delta_channel_reads_its_threads_in_full_mode(db_saver):
    thread_id = new_thread_id("own-delta")
    own = accessor("full", saver=db_saver, spec=OWN_DELTA_SPEC)
    assert own.storage_mode == "delta" and own.mode == "full"
    invoke(own, thread_id, "one", "two")
    assert head_metadata(db_saver, thread_id)[DELTA_MARKER_KEY] == "delta"
    older = checkpoint_tuples(db_saver, thread_id)[2].config["configurable"]["checkpoint_id"]  # turn one's end
    assert [m.content for m in own.get(thread_id).values["messages"]] == ["one", "two"]
    assert [m.content for m in own.get(thread_id, checkpoint_id=older).values["messages"]] == ["one"]
    assert len(own.history(thread_id, limit=10)) == len(checkpoint_tuples(db_saver, thread_id))
    invoke(own, thread_id, "three")
    own.update(thread_id, {"messages": [HumanMessage("replaced")]})  # an update replaces a reducer channel
    assert [m.content for m in own.get(thread_id).values["messages"]] == ["replaced"]
    assert [m.content for m in own.get(thread_id, checkpoint_id=older).values["messages"]] == ["one"]
    # A graph with a plain add_messages channel still may not read that thread.
    with pytest.raises(CheckpointModeMismatchError, match=MISMATCH):
        accessor("full", saver=db_saver, spec=NOOP_SPEC).get(thread_id)


async def test_full_mode_accessor_rejects_real_delta_checkpoint_async(transactional_db):
    thread_id = new_thread_id("areject")
    try:
        resources = await async_resources()
        delta = StateAccessor(resolve_graph("lead_agent"), "delta", 2, saver=resources.saver, store=resources.store)
        await delta.graph.ainvoke({"messages": [HumanMessage(content="one")]}, delta.config(thread_id))
        full = StateAccessor(resolve_graph("lead_agent"), "full", 2, saver=resources.saver, store=resources.store)
        with pytest.raises(CheckpointModeMismatchError, match=MISMATCH):
            await full.aget(thread_id)
        with pytest.raises(CheckpointModeMismatchError, match=MISMATCH):
            await full.aupdate(thread_id, {"title": "x"})
        with pytest.raises(CheckpointModeMismatchError, match=MISMATCH):
            await full.ahistory(thread_id, limit=5)
        # The delta reader still sees everything.
        assert [m.content for m in (await delta.aget(thread_id)).values["messages"]] == ["one", "echo: one"]
    finally:
        await aclose_async_resources()


# -- reconfiguration ------------------------------------------------------------------


def test_config_mode_change_is_rejected_when_the_accessor_is_rebuilt(settings, unfrozen_mode):
    assert state_accessor("lead_agent").mode == "full"
    configure(settings, checkpoint_channel_mode="delta")
    with pytest.raises(CheckpointModeReconfigurationError, match="checkpoint_channel_mode is restart-required"):
        state_accessor("lead_agent")
    assert modes.frozen_settings()[0] == "full"


def test_config_snapshot_frequency_change_is_rejected_when_the_accessor_is_rebuilt(settings, unfrozen_mode):
    configure(settings, snapshot_frequency=250)
    assert state_accessor("lead_agent").snapshot_frequency == 250
    configure(settings, snapshot_frequency=500)
    with pytest.raises(CheckpointModeReconfigurationError, match="snapshot_frequency is restart-required"):
        state_accessor("lead_agent")
    assert modes.frozen_settings()[1] == 250


def test_startup_rejects_a_mode_different_from_the_frozen_one(settings, unfrozen_mode):
    modes.freeze_channel_mode("full")
    configure(settings, checkpoint_channel_mode="delta")
    errors = check_channel_mode(None)
    assert [e.id for e in errors] == ["checkpoints.E001"]
    assert "restart-required" in errors[0].msg
    close_sync_resources()
    with pytest.raises(CheckpointModeReconfigurationError):
        sync_resources()


def test_config_cadence_is_frozen_and_used_by_the_accessor(settings, unfrozen_mode):
    configure(settings, checkpoint_channel_mode="delta", snapshot_frequency=7)
    acc = state_accessor("lead_agent")
    assert modes.frozen_settings() == ("delta", 7)
    channel = acc.graph.channels["messages"]
    assert isinstance(channel, DeltaChannel) and channel.snapshot_frequency == 7
    # A delta process reads through the history cache.
    assert isinstance(acc.saver, CachedHistorySaver)
