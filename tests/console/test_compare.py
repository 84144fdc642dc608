"""Two runs or two threads side by side in the console: inputs, outcomes, messages, tokens, durations."""

from __future__ import annotations

import re

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from checkpoints.serialization import serialize
from runs.services.events import run_events_append
from tests.console import VIEW_ALL, _thread, staff
from tests.console.test_threads import make_run
from tests.helpers import run_turns

pytestmark = pytest.mark.django_db(transaction=True)

COMPARE = "/admin/threads/threadmeta/compare/"


@pytest.fixture
def support(db):
    return staff(perms=VIEW_ALL)


def journal(run, *messages) -> None:
    events = [
        {"event_type": "llm.human.input" if m.type == "human" else "llm.ai.response", "content": serialize(m)}
        for m in messages
    ]
    run_events_append(thread_id=run.thread_id, run_id=run.run_id, events=events)


@pytest.fixture
def two_runs(owner):
    thread = _thread(owner.user, "retry", display_name="Retry")
    first = make_run(
        thread,
        seconds=1.5,
        first_human_message="Summarise the contract",
        last_ai_message="It is a lease.",
        total_tokens=40,
        total_input_tokens=30,
        total_output_tokens=10,
        token_usage_by_model={"demo-echo": {"total_tokens": 40}},
        model_name="demo-echo",
    )
    journal(first, HumanMessage("Summarise the contract"), AIMessage("It is a lease."))
    second = make_run(
        thread,
        seconds=6.25,
        status="error",
        error="model timed out",
        kwargs={"input": {"messages": [{"role": "user", "content": "Summarise the contract"}]}, "checkpoint_id": "c1"},
        total_tokens=90,
        token_usage_by_model={"demo-large": {"total_tokens": 90}},
    )
    journal(second, HumanMessage("Summarise the contract"), AIMessage("It is a rental agreement"))
    return first, second


def cell_texts(html: str, row_class: str) -> list[str]:
    row = re.search(rf'<tr class="{row_class}">(.*?)</tr>', html, re.S).group(1)
    return [
        re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", cell)).strip()
        for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    ]


def test_two_runs_side_by_side(support, two_runs):
    first, second = two_runs
    html = support.get(COMPARE, {"run": [first.pk, second.pk]}).content.decode()
    assert cell_texts(html, "compare-input") == ["Summarise the contract", "Summarise the contract"]
    outcome = cell_texts(html, "compare-outcome")
    assert outcome[0] == "success It is a lease."
    assert outcome[1].startswith("error forked failed") and "model timed out" in outcome[1]
    assert cell_texts(html, "compare-duration") == ["1.50 s", "6.25 s"]
    tokens = cell_texts(html, "compare-tokens")
    assert tokens[0].startswith("40 (30 in, 10 out)") and "demo-echo: 40" in tokens[0]
    assert "demo-large: 90" in tokens[1]
    assert '<p id="first-difference">They differ from message 2 on; messages 1–1 are the same.</p>' in html
    rows = re.findall(r'<tr class="(same|differs)">', html)
    assert rows == ["same", "differs"]
    assert "It is a rental agreement" in html


def test_two_threads_side_by_side_show_where_a_branch_left(support, owner):
    original = _thread(owner.user, "original", display_name="Original")
    run_turns(original.pk, ["first", "second"])
    branch = _thread(owner.user, "branch", display_name="Branch")
    run_turns(branch.pk, ["first", "other"])
    make_run(original, seconds=2, total_tokens=12, token_usage_by_model={"demo-echo": {"total_tokens": 12}})
    html = support.get(COMPARE, {"thread": [original.pk, branch.pk]}).content.decode()
    assert "They differ from message 3 on; messages 1–2 are the same." in html
    messages = re.search(r'<table id="compare-messages">(.*?)</table>', html, re.S).group(1)
    assert "echo: second" in messages and "echo: other" in messages
    assert cell_texts(html, "compare-turns") == ["1", "0"]
    assert cell_texts(html, "compare-duration") == ["2.0 s / 2.0 s", "–"]
    assert "demo-echo: 12" in cell_texts(html, "compare-tokens")[0]


def test_compare_without_two_ids_explains_how(support, two_runs):
    html = support.get(COMPARE).content.decode()
    assert 'id="compare-help"' in html
    assert 'id="compare-help"' in support.get(COMPARE, {"run": two_runs[0].pk}).content.decode()
    assert support.get(COMPARE, {"run": [two_runs[0].pk, "nope"]}).status_code == 404


def test_compare_needs_the_view_permissions(two_runs):
    first, second = two_runs
    assert staff().get(COMPARE).status_code == 403
    threads_only = staff(perms=("threads.view_threadmeta",))
    assert threads_only.get(COMPARE, {"run": [first.pk, second.pk]}).status_code == 403
    assert threads_only.get(COMPARE, {"thread": [first.thread_id, first.thread_id]}).status_code == 404
    no_events = staff(perms=("threads.view_threadmeta", "runs.view_run"))
    html = no_events.get(COMPARE, {"run": [first.pk, second.pk]}).content.decode()
    assert "Messages need the runs.view_runevent permission." in html and "rental agreement" not in html


def test_compare_costs_a_fixed_number_of_queries(support, two_runs, django_assert_max_num_queries):
    first, second = two_runs
    for _ in range(30):
        journal(second, AIMessage("more"))
    # session, user, permissions (2), the two runs, their message events
    with django_assert_max_num_queries(6):
        assert support.get(COMPARE, {"run": [first.pk, second.pk]}).status_code == 200
