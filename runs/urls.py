from django.urls import path

from core.routes import collection_routes, routes
from runs.api import assistants, branches, crons, events, feedback, runs, thread_stream
from runs.api.mcp import McpView

A = "assistants/<str:assistant_id>"
T = "threads/<str:thread_id>"
R = f"{T}/runs/<str:run_id>"

urlpatterns = [
    # MCP's Streamable HTTP (runs.mcp): every assistant a tool, with sessions and resumable calls.
    path("mcp", McpView.as_view(), name="mcp"),
    *collection_routes(
        "assistants",
        "assistant",
        create=assistants.AssistantCreateView,
        search=assistants.AssistantSearchView,
        count=assistants.AssistantCountView,
        detail=assistants.AssistantDetailView,
        id_param="assistant_id",
    ),
    *routes(
        A,
        "assistant",
        {
            "graph": assistants.AssistantGraphView,
            "schemas": assistants.AssistantSchemasView,
            "subgraphs": assistants.AssistantSubgraphsView,
            "versions": assistants.AssistantVersionsView,
            "latest": assistants.AssistantLatestView,
        },
    ),
    path(
        f"{A}/subgraphs/<path:namespace>",
        assistants.AssistantSubgraphsNamespaceView.as_view(),
        name="assistant-subgraphs-namespace",
    ),
    *routes(
        T,
        "thread",
        {
            "commands": thread_stream.ThreadCommandsView,
            "stream/events": thread_stream.ThreadStreamEventsView,
            "messages": events.ThreadMessagesView,
            "messages/page": events.ThreadMessagesPageView,
            "token-usage": events.ThreadTokenUsageView,
        },
    ),
    path(f"{T}/stream", thread_stream.ThreadJoinStreamView.as_view(), name="thread-join-stream"),
    path(f"{T}/branches", branches.BranchCreateView.as_view(), name="thread-branch"),
    # Every "{T}/runs/…" route before R, which would otherwise take its last part as a run id.
    path(f"{T}/runs", runs.RunCreateView.as_view(), name="run-create"),
    path(f"{T}/runs/crons", crons.ThreadCronCreateView.as_view(), name="thread-cron-create"),
    *routes(
        f"{T}/runs",
        "run",
        {
            "stream": runs.RunStreamView,
            "wait": runs.RunWaitView,
            "regenerate/prepare": branches.RegeneratePrepareView,
            "edit-regenerate/prepare": branches.EditRegeneratePrepareView,
        },
    ),
    path(R, runs.RunDetailView.as_view(), name="run-detail"),
    *routes(R, "run", {"cancel": runs.RunCancelView, "join": runs.RunJoinView}),
    path(f"{R}/stream", runs.RunJoinStreamView.as_view(), name="run-join-stream"),
    *routes(R, "run", {"messages": events.RunMessagesView, "events": events.RunEventsView}),
    # "feedback/stats" before the feedback id, which would otherwise take it.
    *routes(R, "run", {"feedback": feedback.RunFeedbackView, "feedback/stats": feedback.RunFeedbackStatsView}),
    path(f"{R}/feedback/<str:feedback_id>", feedback.RunFeedbackDetailView.as_view(), name="run-feedback-detail"),
    # Stateless: no thread's runs to list, so no GET.
    path("runs", runs.RunCreateView.as_view(http_method_names=["post", "options"]), name="stateless-run-create"),
    *routes(
        "runs", "stateless-run", {"stream": runs.RunStreamView, "wait": runs.RunWaitView, "batch": runs.RunBatchView}
    ),
    path("runs/cancel", runs.RunCancelManyView.as_view(), name="run-cancel-many"),
    *collection_routes(
        "runs/crons",
        "cron",
        create=crons.CronCreateView,
        search=crons.CronSearchView,
        count=crons.CronCountView,
        detail=crons.CronDetailView,
        id_param="cron_id",
    ),
    # Last: "runs/crons/feedback" stays the cron route's (a cron id), never a run named "crons".
    path("runs/<str:run_id>/feedback", feedback.RunFeedbackByRunView.as_view(), name="run-feedback-by-run"),
]
