"""Users' graphs from langgraph.json: builders, compiled graphs (settings kept) and factories, in both modes."""

from __future__ import annotations

import uuid
from io import StringIO
from pathlib import Path

import pytest
from channels.db import database_sync_to_async as db
from django.core.management import call_command
from langgraph.channels.delta import DeltaChannel
from langgraph_sdk.runtime import ServerRuntime

from checkpoints.accessor import state_accessor
from checkpoints.checks import check_graphs_load
from checkpoints.graphs import _factory_params, adapt_graph, load_graph

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "byo_graphs"


def test_each_kind_is_told_apart(byo_graphs):
    kinds = {gid: load_graph(path).kind for gid, path in byo_graphs.graphs.items()}
    assert kinds == {
        "lead_agent": "builder",
        "compiled_agent": "compiled",
        "factory_agent": "factory",
        "builder_agent": "builder",
        "deps_agent": "compiled",
    }


@pytest.mark.parametrize("mode", ["full", "delta"])
def test_a_compiled_graph_keeps_what_it_was_compiled_with(byo_graphs, mode):
    original = load_graph(byo_graphs.graphs["compiled_agent"]).target
    adapted = adapt_graph(original, mode, 10, graph_id="compiled_agent")

    assert adapted.name == "reviewed_drafts"
    assert adapted.interrupt_before_nodes == ["review"]
    assert adapted.config["recursion_limit"] == 7
    assert isinstance(adapted.channels["messages"], DeltaChannel) is (mode == "delta")
    assert isinstance(adapted.builder.channels["messages"], DeltaChannel) is (mode == "delta")
    assert not isinstance(original.channels["messages"], DeltaChannel)  # the user's object is untouched


def test_an_unnamed_graph_is_named_after_its_graph_id(byo_graphs):
    builder = load_graph(byo_graphs.graphs["builder_agent"]).target
    assert adapt_graph(builder, "full", 10, graph_id="builder_agent").name == "builder_agent"
    assert adapt_graph(builder.compile(), "delta", 10, graph_id="builder_agent").name == "builder_agent"


def _zero():
    return None


def _config(config):
    return config


def _runtime(rt: ServerRuntime):
    return rt


def _both(runtime: ServerRuntime, config):
    return runtime, config


def _untyped(config, runtime):
    return config, runtime


def _three(a, b, c):
    return a


@pytest.mark.parametrize(
    ("fn", "params"),
    [
        (_zero, (None, None)),
        (_config, ("config", None)),
        (_runtime, (None, "rt")),
        (_both, ("config", "runtime")),
        (_untyped, ("config", "runtime")),
    ],
)
def test_factories_are_classified_by_signature_as_the_platform_does(fn, params):
    assert _factory_params(fn) == params


def test_a_factory_with_three_parameters_is_refused():
    with pytest.raises(TypeError, match=r"got \(a, b, c\)"):
        _factory_params(_three)


def test_a_graph_that_fails_to_import_is_a_check_error_naming_it_but_migrate_still_runs(settings, tmp_path, db):
    (tmp_path / "broken.py").write_text("import no_such_module_here\n")
    settings.DEERFLOW = {
        **settings.DEERFLOW,
        "GRAPHS": {**settings.DEERFLOW["GRAPHS"], "broken": f"{tmp_path}/broken.py:graph"},
    }

    errors = check_graphs_load(None)
    assert [e.id for e in errors] == ["checkpoints.E002"]
    assert "'broken'" in errors[0].msg and "No module named 'no_such_module_here'" in errors[0].msg
    # The commands that repair a deployment run regardless (they would raise SystemCheckError).
    call_command("migrate", "--check", stdout=StringIO(), skip_checks=False)
    call_command("create_api_key", f"u-{uuid.uuid4().hex[:6]}", stdout=StringIO(), skip_checks=False)
    with pytest.raises(Exception, match="E002"):
        call_command("check", stdout=StringIO(), stderr=StringIO())


from tests.helpers import aexecute_run, anew_thread  # noqa: E402


@pytest.mark.django_db(transaction=True)
async def test_a_factory_is_called_per_run_with_the_runs_config_context_and_an_execution_runtime(
    byo_graphs, owner, closing_savers
):
    thread = await anew_thread(owner)
    _, thread = await aexecute_run(
        owner,
        thread,
        "factory_agent",
        {"input": {"text": "hi"}, "config": {"configurable": {"suffix": "first"}}, "context": {"value": "ctx"}},
    )
    state = await db(lambda: state_accessor("factory_agent").get(thread.thread_id))()  # a factory read
    assert state.values == {
        "text": "hi first",
        "suffix": "first",
        "access_context": "threads.create_run",
        "context_value": "ctx",
        "user_id": str(owner.user.pk),
    }
    _, thread = await aexecute_run(
        owner, thread, "factory_agent", {"input": {"text": "again"}, "config": {"configurable": {"suffix": "second"}}}
    )
    state = await db(lambda: state_accessor("factory_agent").get(thread.thread_id))()
    assert (state.values["text"], state.values["context_value"]) == ("again second", "")


@pytest.mark.django_db(transaction=True)
async def test_a_graph_needing_the_dependencies_folder_and_env_runs(byo_graphs, owner, closing_savers):
    thread = await anew_thread(owner)
    _, thread = await aexecute_run(
        owner, thread, "deps_agent", {"input": {"messages": [{"role": "user", "content": "hey"}]}}
    )
    state = await db(lambda: state_accessor("deps_agent").get(thread.thread_id))()
    assert state.values["messages"][-1].content == "hello from .env: HEY!"
