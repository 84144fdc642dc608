"""``merge_message_writes`` is ``add_messages`` folded write by write, and batching-invariant.

``DeltaChannel`` replays stored writes in batches of any size (one reducer call
per read), so any difference from ``add_messages`` or any dependence on how the
writes are split would make a delta thread read differently from the full
thread it replaced. Hypothesis generates write sequences over a small id pool
(so replacements, duplicates and removals collide often) in every input shape
``add_messages`` accepts: messages, chunks, dicts, tuples, strings, single
messages and lists, ``RemoveMessage`` and ``REMOVE_ALL_MESSAGES``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    HumanMessageChunk,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.channels.delta import DeltaChannel
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages

from checkpoints.reducer import merge_message_writes

pytestmark = pytest.mark.backend_free  # no Django database: the SQLite pass runs it once

IDS = ["a", "b", "c", "d", "e"]
SHAPES = ["human", "ai", "system", "tool", "ai_chunk", "human_chunk", "dict_type", "dict_role", "tuple", "str"]
PROPERTY_SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# A message is described as plain data and built fresh for every run: both
# reducers assign ids to id-less messages in place, so they must never share
# input objects.
message_specs = st.fixed_dictionaries(
    {
        "shape": st.sampled_from(SHAPES),
        "id": st.one_of(st.none(), st.sampled_from(IDS)),
        "text": st.text(alphabet="xyz", min_size=0, max_size=3),
    }
)
remove_specs = st.fixed_dictionaries({"shape": st.just("remove"), "id": st.sampled_from([*IDS, "zz-unknown"])})
remove_all_specs = st.just({"shape": "remove_all"})
item_specs = st.one_of(
    message_specs, message_specs, message_specs, remove_specs, st.one_of(remove_all_specs, message_specs)
)
# A write is one item (not wrapped in a list) or a list of items, as node outputs are.
write_specs = st.one_of(
    st.fixed_dictionaries({"single": item_specs}),
    st.fixed_dictionaries({"many": st.lists(item_specs, max_size=5)}),
)
state_specs = st.lists(message_specs, max_size=5)


def build_item(spec: dict[str, Any]) -> Any:
    """Return a fresh input object of the described shape."""
    shape, message_id, text = spec["shape"], spec.get("id"), spec.get("text", "")
    builders: dict[str, Callable[[], Any]] = {
        "human": lambda: HumanMessage(content=text, id=message_id),
        "ai": lambda: AIMessage(content=text, id=message_id),
        "system": lambda: SystemMessage(content=text, id=message_id),
        "tool": lambda: ToolMessage(content=text, tool_call_id="call-1", id=message_id),
        "ai_chunk": lambda: AIMessageChunk(content=text, id=message_id),
        "human_chunk": lambda: HumanMessageChunk(content=text, id=message_id),
        "dict_type": lambda: {"type": "ai", "content": text, **({"id": message_id} if message_id else {})},
        "dict_role": lambda: {"role": "user", "content": text, **({"id": message_id} if message_id else {})},
        "tuple": lambda: ("assistant", text),
        "str": lambda: text,
        "remove": lambda: RemoveMessage(id=message_id),
        "remove_all": lambda: RemoveMessage(id=REMOVE_ALL_MESSAGES),
    }
    return builders[shape]()


def build_write(spec: dict[str, Any]) -> Any:
    if "single" in spec:
        return build_item(spec["single"])
    return [build_item(item) for item in spec["many"]]


def build_state(specs: list[dict[str, Any]]) -> list[Any]:
    return [build_item(spec) for spec in specs]


def canonical(messages: list[BaseMessage]) -> list[tuple[str, str, Any, str]]:
    """Return the messages with generated uuids renamed by first appearance.

    Ids given by the test stay as they are; an id a reducer generated becomes
    ``gen-0``, ``gen-1``… so two runs that generate different uuids for the
    same id-less inputs compare equal, and nothing else is hidden.
    """
    renamed: dict[str, str] = {}

    def name(message_id: str) -> str:
        if message_id in IDS or message_id == REMOVE_ALL_MESSAGES:
            return message_id
        return renamed.setdefault(message_id, f"gen-{len(renamed)}")

    return [(type(m).__name__, name(m.id), m.content, m.type) for m in messages]


def fold_add_messages(state: list[Any], writes: list[Any]) -> list[BaseMessage]:
    """The reference: ``add_messages`` applied write by write."""
    return reduce(add_messages, writes, add_messages(state, []))


def outcome(function: Callable[[], list[BaseMessage]]) -> tuple[str, Any]:
    """Return ("ok", canonical result) or ("error", exception type and text)."""
    try:
        return "ok", canonical(function())
    except ValueError as exc:
        return "error", (type(exc).__name__, _error_text(exc))
    except NotImplementedError as exc:
        return "error", (type(exc).__name__, "")


def _error_text(exc: Exception) -> str:
    text = str(exc)
    # Our None-write message differs in words from add_messages' decorator; both are ValueErrors.
    return "none-write" if "non-null" in text or "None write" in text else text


@PROPERTY_SETTINGS
@given(state=state_specs, writes=st.lists(write_specs, max_size=8))
def test_equals_add_messages_folded_write_by_write(state, writes):
    expected = outcome(lambda: fold_add_messages(build_state(state), [build_write(w) for w in writes]))
    actual = outcome(lambda: merge_message_writes(build_state(state), [build_write(w) for w in writes]))
    assert actual == expected


@PROPERTY_SETTINGS
@given(state=state_specs, writes=st.lists(write_specs, max_size=8), cut=st.integers(min_value=0, max_value=8))
def test_is_batching_invariant(state, writes, cut):
    cut = min(cut, len(writes))
    whole = outcome(lambda: merge_message_writes(build_state(state), [build_write(w) for w in writes]))

    def split() -> list[BaseMessage]:
        built = [build_write(w) for w in writes]
        return merge_message_writes(merge_message_writes(build_state(state), built[:cut]), built[cut:])

    assert outcome(split) == whole


@PROPERTY_SETTINGS
@given(
    state=state_specs,
    writes=st.lists(write_specs, max_size=8),
    sizes=st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=8),
)
def test_delta_channel_replay_in_any_batches_equals_the_fold(state, writes, sizes):
    """A DeltaChannel fed the writes in arbitrary batches reads what the full channel reads."""
    expected = outcome(lambda: fold_add_messages(build_state(state), [build_write(w) for w in writes]))

    def through_channel() -> list[BaseMessage]:
        # A stored seed is always a list of messages (what the channel held).
        seed = add_messages(build_state(state), [])
        channel = DeltaChannel(merge_message_writes, list, snapshot_frequency=3).from_checkpoint(seed)
        built, start = [build_write(w) for w in writes], 0
        for size in sizes * (len(built) + 1):
            if start >= len(built):
                break
            channel.update(built[start : start + size])
            start += size
        return channel.get()

    assert outcome(through_channel) == expected


def test_generated_ids_are_assigned_once_and_kept():
    message = HumanMessage(content="no id")
    first = merge_message_writes([], [[message]])
    assert first[0].id and first[0] is message
    again = merge_message_writes(first, [[HumanMessage(content="other")]])
    assert again[0].id == first[0].id


def test_replacement_keeps_the_position():
    state = [HumanMessage("one", id="a"), AIMessage("two", id="b")]
    merged = merge_message_writes(state, [[AIMessage("ONE", id="a")]])
    assert [(m.id, m.content) for m in merged] == [("a", "ONE"), ("b", "two")]


def test_remove_then_readd_in_one_write_keeps_the_message():
    state = [HumanMessage("one", id="a")]
    merged = merge_message_writes(state, [[RemoveMessage(id="a"), HumanMessage("back", id="a")]])
    assert [(m.id, m.content) for m in merged] == [("a", "back")]


def test_remove_all_keeps_only_what_follows_the_last_marker():
    state = [HumanMessage("one", id="a")]
    write = [HumanMessage("x", id="b"), RemoveMessage(id=REMOVE_ALL_MESSAGES), AIMessage("kept", id="c")]
    merged = merge_message_writes(state, [write, [HumanMessage("after", id="d")]])
    assert [m.id for m in merged] == ["c", "d"]


def test_removing_an_unknown_id_fails_like_add_messages():
    with pytest.raises(ValueError, match="doesn't exist \\('ghost'\\)"):
        merge_message_writes([HumanMessage("one", id="a")], [[RemoveMessage(id="ghost")]])
    with pytest.raises(ValueError, match="doesn't exist \\('ghost'\\)"):
        add_messages([HumanMessage("one", id="a")], [RemoveMessage(id="ghost")])


def test_a_none_write_is_an_error():
    with pytest.raises(ValueError):
        merge_message_writes([], [None])


def test_chunks_dicts_and_tuples_become_messages():
    merged = merge_message_writes(
        [], [AIMessageChunk(content="c", id="k"), {"role": "user", "content": "d"}, ("assistant", "t")]
    )
    assert [type(m) for m in merged] == [AIMessage, HumanMessage, AIMessage]
    assert all(m.id for m in merged)


def test_write_time_id_stamping_is_installed_where_langgraph_looks_it_up():
    from langgraph.pregel import _loop, main

    for module in (_loop, main):
        assert getattr(module.ensure_message_ids, "__wrapped__", None) is not None, module.__name__
