"""The demo agent: a real graph whose commands drive every server path deterministically."""

from __future__ import annotations

import time
import uuid

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.types import Command

from checkpoints.accessor import state_accessor
from runs.demo_agent import MODEL_NAME, DemoChatModel
from tests.helpers import run_turns

pytestmark = pytest.mark.django_db(transaction=True)


def new_thread() -> str:
    return f"demo-{uuid.uuid4().hex}"


def messages(thread_id: str):
    return state_accessor("lead_agent").get(thread_id).values["messages"]


def test_echoes_and_sets_the_title_once():
    thread_id = new_thread()
    long_text = "a title that is definitely longer than fifty characters in total"
    run_turns(thread_id, [long_text, "second"])
    state = state_accessor("lead_agent").get(thread_id).values
    assert state["title"] == long_text[:50]
    assert [m.content for m in state["messages"]] == [long_text, f"echo: {long_text}", "second", "echo: second"]


def test_reports_token_usage_and_model_name():
    thread_id = new_thread()
    run_turns(thread_id, ["three word prompt"])
    reply = messages(thread_id)[-1]
    assert isinstance(reply, AIMessage)
    assert reply.usage_metadata == {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}
    assert reply.response_metadata["model_name"] == MODEL_NAME


def test_streams_token_by_token():
    chunks = list(DemoChatModel().stream([HumanMessage(content="one two three")]))
    assert [c.content for c in chunks] == ["echo: ", "one ", "two ", "three"]
    assert chunks[-1].usage_metadata["output_tokens"] == 4


def test_slow_spreads_the_reply_over_the_requested_time():
    start = time.monotonic()
    list(DemoChatModel().stream([HumanMessage(content="/slow 0.6")]))
    assert 0.5 <= time.monotonic() - start < 3


def test_fail_raises_the_demo_error():
    with pytest.raises(RuntimeError, match="demo failure requested"):
        run_turns(new_thread(), ["/fail"])


def test_interrupt_waits_then_replies_with_the_resume_value():
    thread_id = new_thread()
    run_turns(thread_id, ["/interrupt"])
    accessor = state_accessor("lead_agent")
    snapshot = accessor.get(thread_id)
    assert snapshot.next == ("agent",)
    assert snapshot.interrupts[0].value == {"question": "approve?"}
    accessor.graph.invoke(Command(resume="yes"), accessor.config(thread_id))
    assert messages(thread_id)[-1].content == "resumed: yes"


def test_image_adds_a_hidden_message_with_a_data_url():
    thread_id = new_thread()
    run_turns(thread_id, ["/image"])
    hidden = [m for m in messages(thread_id) if m.additional_kwargs.get("hide_from_ui")]
    assert len(hidden) == 1
    blocks = hidden[0].content
    assert blocks[0]["type"] == "text"
    assert blocks[1]["image_url"]["url"].startswith("data:image/png;base64,")


def test_review_asks_as_langchains_human_in_the_loop_and_replies_with_the_decision():
    from runs.demo_agent import review_request

    thread_id = new_thread()
    run_turns(thread_id, ["/review ship it"])
    accessor = state_accessor("lead_agent")
    assert accessor.get(thread_id).interrupts[0].value == review_request("ship it")
    decision = {"decisions": [{"type": "edit", "edited_action": {"name": "send_reply", "args": {"text": "ship v2"}}}]}
    accessor.graph.invoke(Command(resume=decision), accessor.config(thread_id))
    assert messages(thread_id)[-1].content == "edited: ship v2"
