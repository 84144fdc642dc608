"""DeerFlow's thread routes: the goal (T7–T9), compaction (T10) and context usage in token usage (R17).

Every write here goes through the state-only mutation graph under the
checkpoint-write reservation: refused with DeerFlow's texts while a run is
in flight, and no run is admitted while it writes.
"""

from __future__ import annotations

from typing import Annotated, Any, NotRequired

import pytest
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.messages.utils import count_tokens_approximately
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from checkpoints.accessor import StateAccessor, state_accessor
from checkpoints.graphs import graph_cache
from runs.models import Run, RunStatus
from runs.services.admission import run_admit
from tests.checkpoints.support import accessor as mode_accessor
from tests.checkpoints.support import invoke
from tests.helpers import raw_checkpoint_count, run_turns
from tests.threads.test_state_modes import process_in_mode
from threads.compaction import Compaction, Keep, builtin_compactor
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)

HERE = "tests.threads.test_deerflow_thread_routes"


class GoalState(TypedDict):
    """DeerFlow's thread state, as far as these routes read it: messages, title, goal, summary."""

    messages: Annotated[list[AnyMessage], add_messages]
    title: NotRequired[str]
    goal: NotRequired[dict[str, Any] | None]
    summary_text: NotRequired[str]


def _echo(state: GoalState) -> dict[str, Any]:
    return {"messages": [AIMessage(content=f"echo: {state['messages'][-1].text}")]}


goal_builder = StateGraph(GoalState)
goal_builder.add_node("reply", _echo)
goal_builder.add_edge(START, "reply")


def keep_last_one(messages, *, keep, force, summary, model_name) -> Compaction | None:
    """A configured compactor: keeps one message and says what it saw."""
    return Compaction(messages[-1:], messages[:-1], f"{len(messages)} seen, force={force}, model={model_name}")


def failing_compactor(messages, **kwargs):
    raise RuntimeError("the summary model is down")


@pytest.fixture
def goal_graph(settings):
    """Serve ``goal_agent`` (a graph with DeerFlow's ``goal`` and ``summary_text`` channels)."""
    settings.DEERFLOW = {
        **settings.DEERFLOW,
        "GRAPHS": {**settings.DEERFLOW["GRAPHS"], "goal_agent": f"{HERE}:goal_builder"},
    }
    yield "goal_agent"
    graph_cache.clear()


def context_config(settings, **fields) -> None:
    config = settings.DEERFLOW_CONFIG.model_copy(deep=True)
    for key, value in fields.items():
        setattr(config.context, key, value)
    settings.DEERFLOW_CONFIG = config


def create_thread(owner, graph_id: str | None = None) -> str:
    metadata = {"graph_id": graph_id} if graph_id else {}
    response = owner.client.post("/api/threads", {"metadata": metadata}, format="json")
    assert response.status_code == 200, response.content
    return response.json()["thread_id"]


def admit_run(owner, thread_id: str) -> Run:
    thread = ThreadMeta.objects.get(pk=thread_id)
    run, _ = run_admit(
        owner=owner.user,
        thread=thread,
        assistant_id=thread.assistant_id,
        strategy="reject",
        metadata={},
        kwargs={},
    )
    return run


def head(owner, thread_id: str) -> dict[str, Any]:
    [entry] = owner.client.get(f"/api/threads/{thread_id}/history?limit=1").json()
    return entry


# -- goal --------------------------------------------------------------------


def test_a_goal_is_set_read_and_cleared_as_a_goal_channel_checkpoint(owner, goal_graph):
    thread_id = create_thread(owner, goal_graph)
    run_turns(thread_id, ["one"], assistant_id=goal_graph)
    head_before = head(owner, thread_id)
    put = owner.client.put(
        f"/api/threads/{thread_id}/goal", {"objective": "  ship  the\nrelease ", "max_continuations": 3}, format="json"
    )
    assert put.status_code == 200, put.content
    goal = put.json()["goal"]
    assert goal["objective"] == "ship the release"
    assert (goal["status"], goal["continuation_count"], goal["max_continuations"]) == ("active", 0, 3)
    assert goal["no_progress_count"] == 0 and goal["max_no_progress_continuations"] == 2
    assert owner.client.get(f"/api/threads/{thread_id}/goal").json() == {"goal": goal}
    written = head(owner, thread_id)
    assert written["values"]["goal"] == goal
    assert written["metadata"]["source"] == "update"
    assert written["metadata"]["step"] == head_before["metadata"]["step"] + 1
    assert [m["content"] for m in written["values"]["messages"]] == ["one", "echo: one"]

    cleared = owner.client.delete(f"/api/threads/{thread_id}/goal")
    assert cleared.status_code == 200 and cleared.json() == {"goal": None}
    assert owner.client.get(f"/api/threads/{thread_id}/goal").json() == {"goal": None}
    before = raw_checkpoint_count(thread_id)
    assert owner.client.delete(f"/api/threads/{thread_id}/goal").json() == {"goal": None}
    assert raw_checkpoint_count(thread_id) == before, "clearing no goal writes nothing"


def test_putting_a_goal_creates_the_thread_and_its_first_checkpoint(owner, settings):
    settings.DEERFLOW = {
        **settings.DEERFLOW,
        "GRAPHS": {**settings.DEERFLOW["GRAPHS"], "lead_agent": f"{HERE}:goal_builder"},
    }
    try:
        response = owner.client.put("/api/threads/fresh-goal-thread/goal", {"objective": "plan"}, format="json")
        assert response.status_code == 200, response.content
        assert response.json()["goal"]["max_continuations"] == 8
        assert ThreadMeta.objects.get(pk="fresh-goal-thread").owner_id == owner.user.pk
        assert raw_checkpoint_count("fresh-goal-thread") >= 1
        assert owner.client.get("/api/threads/fresh-goal-thread/goal").json()["goal"]["objective"] == "plan"
    finally:
        graph_cache.clear()


def test_goal_writes_are_refused_with_deerflows_texts_while_a_run_is_in_flight(owner, goal_graph):
    thread_id = create_thread(owner, goal_graph)
    assert owner.client.put(f"/api/threads/{thread_id}/goal", {"objective": "a"}, format="json").status_code == 200
    admit_run(owner, thread_id)
    before = raw_checkpoint_count(thread_id)
    put = owner.client.put(f"/api/threads/{thread_id}/goal", {"objective": "b"}, format="json")
    delete = owner.client.delete(f"/api/threads/{thread_id}/goal")
    assert (put.status_code, put.json()) == (
        409,
        {"detail": "Thread has a run in flight. Set the goal after the run finishes."},
    )
    assert (delete.status_code, delete.json()) == (
        409,
        {"detail": "Thread has a run in flight. Clear the goal after the run finishes."},
    )
    assert raw_checkpoint_count(thread_id) == before
    assert owner.client.get(f"/api/threads/{thread_id}/goal").json()["goal"]["objective"] == "a"


def test_no_run_is_admitted_while_a_goal_is_written(owner, goal_graph, monkeypatch):
    thread_id = create_thread(owner, goal_graph)
    answers = []
    write = StateAccessor.update

    def update_with_a_run_arriving(self, *args, **kwargs):
        answers.append(
            owner.client.post(
                f"/api/threads/{thread_id}/runs", {"assistant_id": goal_graph, "input": {}}, format="json"
            )
        )
        return write(self, *args, **kwargs)

    monkeypatch.setattr(StateAccessor, "update", update_with_a_run_arriving)
    put = owner.client.put(f"/api/threads/{thread_id}/goal", {"objective": "guarded"}, format="json")
    monkeypatch.undo()
    assert put.status_code == 200, put.content
    [answer] = answers
    assert answer.status_code == 409 and "having its state updated" in answer.json()["detail"]
    assert not Run.objects.filter(thread_id=thread_id).exists()
    assert ThreadMeta.objects.get(pk=thread_id).state_updating_at is None


def test_a_graph_without_a_goal_channel_has_no_goal(owner):
    thread_id = create_thread(owner)
    run_turns(thread_id, ["one"])
    before = raw_checkpoint_count(thread_id)
    put = owner.client.put(f"/api/threads/{thread_id}/goal", {"objective": "x"}, format="json")
    assert put.status_code == 409 and "no 'goal' channel" in put.json()["detail"]
    assert owner.client.get(f"/api/threads/{thread_id}/goal").json() == {"goal": None}
    assert owner.client.delete(f"/api/threads/{thread_id}/goal").json() == {"goal": None}
    assert raw_checkpoint_count(thread_id) == before
    refused = owner.client.put("/api/threads/no-goal-graph/goal", {"objective": "x"}, format="json")
    assert refused.status_code == 409
    assert not ThreadMeta.objects.filter(pk="no-goal-graph").exists(), "a refused goal leaves no thread"


@pytest.mark.parametrize(
    "body",
    [{}, {"objective": ""}, {"objective": "x" * 4001}, {"objective": 5}, {"objective": "x", "max_continuations": 9}],
)
def test_a_bad_goal_is_422(owner, goal_graph, body):
    thread_id = create_thread(owner, goal_graph)
    response = owner.client.put(f"/api/threads/{thread_id}/goal", body, format="json")
    assert response.status_code == 422, response.content


def test_whitespace_only_objective_is_422_and_writes_nothing(owner, goal_graph):
    thread_id = create_thread(owner, goal_graph)
    response = owner.client.put(f"/api/threads/{thread_id}/goal", {"objective": " \n "}, format="json")
    assert response.status_code == 422, response.content
    assert raw_checkpoint_count(thread_id) == 0


def test_another_users_goal_is_404_to_every_method(owner, other, anonymous, goal_graph):
    thread_id = create_thread(owner, goal_graph)
    owner.client.put(f"/api/threads/{thread_id}/goal", {"objective": "mine"}, format="json")
    for method, body in (("get", None), ("put", {"objective": "theirs"}), ("delete", None)):
        answer = getattr(other.client, method)(f"/api/threads/{thread_id}/goal", body, format="json")
        assert (answer.status_code, answer.json()) == (404, {"detail": f"Thread {thread_id} not found"}), method
        assert getattr(anonymous, method)(f"/api/threads/{thread_id}/goal").status_code in (401, 403)
    assert owner.client.get(f"/api/threads/{thread_id}/goal").json()["goal"]["objective"] == "mine"
    assert owner.client.get("/api/threads/never-created/goal").status_code == 404


# -- compaction ------------------------------------------------------------------


def state_messages(owner, thread_id: str) -> list[dict[str, Any]]:
    return owner.client.get(f"/api/threads/{thread_id}/state").json()["values"]["messages"]


def compact(owner, thread_id: str, body: dict[str, Any] | None = None):
    return owner.client.post(f"/api/threads/{thread_id}/compact", body or {}, format="json")


def test_compaction_keeps_the_recent_messages_behind_a_hidden_summary(owner):
    thread_id = create_thread(owner)
    run_turns(thread_id, ["one", "two", "three"])
    before = state_messages(owner, thread_id)
    response = compact(owner, thread_id, {"keep": {"type": "messages", "value": 2}})
    assert response.status_code == 200, response.content
    result = response.json()
    assert result["compacted"] is True and result["summary_updated"] is True and result["reason"] is None
    assert (result["removed_message_count"], result["preserved_message_count"]) == (4, 2)
    assert result["total_tokens"] > 0
    entry = head(owner, thread_id)
    assert result["checkpoint_id"] == entry["checkpoint_id"]
    assert entry["metadata"]["source"] == "update"
    summary, *kept = state_messages(owner, thread_id)
    assert kept == before[-2:]
    assert summary["type"] == "human" and summary["additional_kwargs"]["hide_from_ui"] is True
    assert "User: one" in summary["content"] and "Assistant: echo: two" in summary["content"]
    assert "three" not in summary["content"]


def test_a_second_compaction_folds_the_first_summary_in(owner):
    thread_id = create_thread(owner)
    run_turns(thread_id, ["one", "two"])
    compact(owner, thread_id, {"keep": {"type": "messages", "value": 2}})
    run_turns(thread_id, ["three"])
    result = compact(owner, thread_id, {"keep": {"type": "messages", "value": 2}}).json()
    assert result["removed_message_count"] == 2
    summaries = [m for m in state_messages(owner, thread_id) if m["additional_kwargs"].get("lc_source")]
    assert len(summaries) == 1
    assert "User: one" in summaries[0]["content"] and "User: two" in summaries[0]["content"]
    # The next turn runs on the compacted context.
    run_turns(thread_id, ["four"])
    assert state_messages(owner, thread_id)[-1]["content"] == "echo: four"


def test_nothing_to_fold_is_not_compacted_and_writes_nothing(owner):
    thread_id = create_thread(owner)
    run_turns(thread_id, ["one"])
    before = raw_checkpoint_count(thread_id)
    result = compact(owner, thread_id).json()  # the default keeps 20 messages
    assert result["compacted"] is False and result["reason"] == "not_enough_messages"
    assert result["checkpoint_id"] is None and result["removed_message_count"] == 0
    assert raw_checkpoint_count(thread_id) == before


def test_a_graph_with_a_summary_channel_keeps_the_summary_there(owner, goal_graph):
    thread_id = create_thread(owner, goal_graph)
    run_turns(thread_id, ["one", "two"], assistant_id=goal_graph)
    result = compact(owner, thread_id, {"keep": {"type": "messages", "value": 1}}).json()
    assert result["removed_message_count"] == 3
    values = owner.client.get(f"/api/threads/{thread_id}/state").json()["values"]
    assert [m["content"] for m in values["messages"]] == ["echo: two"]
    assert values["summary_text"].splitlines() == ["User: one", "Assistant: echo: one", "User: two"]


def test_compaction_refusals_are_deerflows(owner, settings):
    thread_id = create_thread(owner)
    run_turns(thread_id, ["one", "two"])
    admit_run(owner, thread_id)
    before = raw_checkpoint_count(thread_id)
    busy = compact(owner, thread_id, {"keep": {"type": "messages", "value": 1}})
    assert (busy.status_code, busy.json()) == (
        409,
        {"detail": "Thread has a run in flight. Compact after the run finishes."},
    )
    context_config(settings, compaction_enabled=False)
    off = compact(owner, thread_id)
    assert (off.status_code, off.json()) == (409, {"detail": "Context compaction is disabled."})
    assert raw_checkpoint_count(thread_id) == before
    assert compact(owner, "no-such-thread").status_code == 404


def test_a_configured_compactor_is_called_and_its_failure_is_deerflows_500(owner, settings):
    thread_id = create_thread(owner)
    run_turns(thread_id, ["one", "two"])
    context_config(settings, compactor=f"{HERE}:keep_last_one")
    result = compact(owner, thread_id, {"force": False, "model_name": "m1"}).json()
    assert (result["removed_message_count"], result["preserved_message_count"]) == (3, 1)
    summary = state_messages(owner, thread_id)[0]["content"]
    assert summary.endswith("4 seen, force=False, model=m1")
    context_config(settings, compactor=f"{HERE}:failing_compactor")
    failed = compact(owner, thread_id)
    assert (failed.status_code, failed.json()) == (500, {"detail": "Failed to compact thread context."})
    context_config(settings, compactor=f"{HERE}:no_such_compactor")
    unloadable = compact(owner, thread_id)
    assert unloadable.status_code == 500 and "no_such_compactor" in unloadable.json()["detail"]


def test_the_graph_compactor_is_the_served_graphs_own(owner, settings, goal_graph, monkeypatch):
    thread_id = create_thread(owner, goal_graph)
    run_turns(thread_id, ["one", "two"], assistant_id=goal_graph)
    context_config(settings, compactor="graph")
    monkeypatch.setattr(goal_builder, "compact_context", keep_last_one, raising=False)
    compact(owner, thread_id)
    assert owner.client.get(f"/api/threads/{thread_id}/state").json()["values"]["summary_text"].startswith("4 seen")


@pytest.mark.parametrize(
    "keep", [{"type": "lines", "value": 2}, {"type": "fraction", "value": 2}, {"type": "messages", "value": -1}, 3]
)
def test_a_bad_keep_is_422(owner, keep):
    thread_id = create_thread(owner)
    assert compact(owner, thread_id, {"keep": keep}).status_code == 422


def test_the_builtin_compactor_never_separates_a_tool_result_from_its_call():
    call = {"name": "lookup", "args": {}, "id": "tc-1", "type": "tool_call"}
    messages: list[BaseMessage] = [
        HumanMessage("q", id="h"),
        AIMessage("", id="a", tool_calls=[call]),
        ToolMessage("result", tool_call_id="tc-1", id="t"),
        AIMessage("answer", id="b"),
    ]
    compaction = builtin_compactor(messages, keep=Keep("messages", 2), force=True, summary=None, model_name=None)
    assert compaction is not None
    assert [m.id for m in compaction.preserved] == ["a", "t", "b"]
    by_tokens = builtin_compactor(
        messages,
        keep=Keep("tokens", count_tokens_approximately(messages[-1:])),
        force=True,
        summary=None,
        model_name=None,
    )
    assert by_tokens is not None and [m.id for m in by_tokens.preserved] == ["b"]


def test_compaction_of_a_delta_thread_replaces_its_messages_in_a_delta_process(owner, settings):
    with process_in_mode(settings, "delta"):
        thread_id = create_thread(owner)
        invoke(mode_accessor("delta"), thread_id, "one", "two", "three")
        result = compact(owner, thread_id, {"keep": {"type": "messages", "value": 1}})
        assert result.status_code == 200, result.content
        messages = state_messages(owner, thread_id)
        assert len(messages) == 2 and messages[0]["additional_kwargs"]["lc_source"] == "summarization"
    refused = compact(owner, thread_id)
    assert refused.status_code == 409
    assert refused.json()["detail"].startswith(f"Thread {thread_id}: Thread requires delta mode;")


# -- context usage ---------------------------------------------------------------


def test_token_usage_reports_context_usage_against_the_models_window(owner, settings):
    thread_id = create_thread(owner)
    run_turns(thread_id, ["one two three", "four"])
    Run.objects.create(
        run_id="r-ctx", thread_id=thread_id, owner=owner.user, status=RunStatus.SUCCESS, model_name="demo-echo"
    )
    usage = owner.client.get(f"/api/threads/{thread_id}/token-usage").json()["context_usage"]
    messages = state_accessor("lead_agent").get(thread_id).values["messages"]
    assert usage == {
        "token_count": count_tokens_approximately(messages),
        "max_context_tokens": None,
        "percentage": None,
    }
    context_config(settings, context_windows={"demo-echo": 200}, default_context_window=10_000)
    usage = owner.client.get(f"/api/threads/{thread_id}/token-usage").json()["context_usage"]
    assert usage["max_context_tokens"] == 200
    assert usage["percentage"] == round(usage["token_count"] / 200 * 100, 1)
    compact(owner, thread_id, {"keep": {"type": "messages", "value": 1}})
    after = owner.client.get(f"/api/threads/{thread_id}/token-usage").json()["context_usage"]
    assert after["token_count"] != usage["token_count"], "it counts the head's messages as they are now"


def test_context_usage_falls_back_to_the_default_window_and_an_empty_thread_counts_zero(owner, settings):
    context_config(settings, default_context_window=1000)
    thread_id = create_thread(owner)
    usage = owner.client.get(f"/api/threads/{thread_id}/token-usage").json()["context_usage"]
    assert usage == {"token_count": 0, "max_context_tokens": 1000, "percentage": 0.0}


# -- projects and move -------------------------------------------------------------


def create_project(persona, name: str = "Research") -> str:
    response = persona.client.post("/api/projects", {"name": name}, format="json")
    assert response.status_code == 200, response.content
    return response.json()["project_id"]


def test_moving_a_thread_files_it_without_touching_its_activity_time(owner):
    thread_id = create_thread(owner)
    project_id = create_project(owner)
    before = ThreadMeta.objects.get(pk=thread_id).updated_at
    moved = owner.client.post(f"/api/threads/{thread_id}/move", {"project_id": project_id}, format="json")
    assert moved.status_code == 200, moved.content
    assert moved.json()["metadata"]["deerflow_project_id"] == project_id
    row = ThreadMeta.objects.get(pk=thread_id)
    assert (row.project_id, row.updated_at) == (project_id, before)
    out = owner.client.post(f"/api/threads/{thread_id}/move", {"project_id": None}, format="json")
    assert "deerflow_project_id" not in out.json()["metadata"]
    assert ThreadMeta.objects.get(pk=thread_id).project_id is None


def test_a_thread_is_created_in_a_project_and_clients_cannot_forge_the_mirror(owner):
    project_id = create_project(owner)
    created = owner.client.post("/api/threads", {"project_id": project_id}, format="json").json()
    assert created["metadata"] == {"deerflow_project_id": project_id}
    assert ThreadMeta.objects.get(pk=created["thread_id"]).project_id == project_id
    forged = owner.client.post("/api/threads", {"metadata": {"deerflow_project_id": project_id}}, format="json")
    assert forged.json()["metadata"] == {}
    patched = owner.client.patch(
        f"/api/threads/{created['thread_id']}", {"metadata": {"deerflow_project_id": "other", "k": 1}}, format="json"
    )
    assert patched.json()["metadata"] == {"deerflow_project_id": project_id, "k": 1}
    copied = owner.client.post(f"/api/threads/{created['thread_id']}/copy", {}, format="json").json()
    assert ThreadMeta.objects.get(pk=copied["thread_id"]).project_id == project_id, "a copy stays in the project"


def test_no_thread_goes_into_another_users_or_an_archived_project(owner, other):
    thread_id = create_thread(owner)
    theirs = create_project(other)
    archived = create_project(owner, "Old")
    assert owner.client.patch(f"/api/projects/{archived}", {"archived": True}, format="json").json()["archived"]
    threads_before = ThreadMeta.objects.count()
    for project_id, code in ((theirs, 404), ("absent", 404), (archived, 409)):
        move = owner.client.post(f"/api/threads/{thread_id}/move", {"project_id": project_id}, format="json")
        create = owner.client.post("/api/threads", {"project_id": project_id}, format="json")
        assert (move.status_code, create.status_code) == (code, code), (project_id, move.content, create.content)
    assert ThreadMeta.objects.count() == threads_before, "a refused project leaves no thread row"
    assert ThreadMeta.objects.get(pk=thread_id).project_id is None
    restored = owner.client.patch(f"/api/projects/{archived}", {"archived": False}, format="json")
    assert restored.json()["archived"] is False
    move = owner.client.post(f"/api/threads/{thread_id}/move", {"project_id": archived}, format="json")
    assert move.status_code == 200


def test_projects_are_per_user_and_moves_need_the_thread(owner, other, anonymous):
    project_id = create_project(owner)
    assert [p["project_id"] for p in owner.client.get("/api/projects").json()] == [project_id]
    assert other.client.get("/api/projects").json() == []
    assert other.client.patch(f"/api/projects/{project_id}", {"name": "x"}, format="json").status_code == 404
    thread_id = create_thread(owner)
    theirs = create_project(other)
    assert other.client.post(f"/api/threads/{thread_id}/move", {"project_id": theirs}, format="json").status_code == 404
    assert anonymous.post(f"/api/threads/{thread_id}/move", {"project_id": None}, format="json").status_code in (
        401,
        403,
    )
    assert anonymous.get("/api/projects").status_code in (401, 403)
    assert owner.client.post(f"/api/threads/{thread_id}/move", {}, format="json").status_code == 422


def test_a_run_answers_deerflows_per_caller_token_fields(owner):
    thread_id = create_thread(owner)
    by_caller = {"lead_agent": 30, "subagent": 7, "middleware": 5}
    Run.objects.create(
        run_id="r-callers",
        thread_id=thread_id,
        owner=owner.user,
        status=RunStatus.SUCCESS,
        token_usage_by_caller=by_caller,
    )
    run = owner.client.get(f"/api/threads/{thread_id}/runs/r-callers").json()
    assert (run["lead_agent_tokens"], run["subagent_tokens"], run["middleware_tokens"]) == (30, 7, 5)
    usage = owner.client.get(f"/api/threads/{thread_id}/token-usage").json()
    assert usage["by_caller"] == by_caller
