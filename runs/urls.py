from django.urls import path

from runs.api import assistants, branches, crons, events, runs, thread_stream

T = "threads/<str:thread_id>"
R = f"{T}/runs/<str:run_id>"

urlpatterns = [
    path("assistants", assistants.AssistantCreateView.as_view(), name="assistant-create"),
    path("assistants/search", assistants.AssistantSearchView.as_view(), name="assistant-search"),
    path("assistants/count", assistants.AssistantCountView.as_view(), name="assistant-count"),
    path("assistants/<str:assistant_id>", assistants.AssistantDetailView.as_view(), name="assistant-detail"),
    path("assistants/<str:assistant_id>/graph", assistants.AssistantGraphView.as_view(), name="assistant-graph"),
    path("assistants/<str:assistant_id>/schemas", assistants.AssistantSchemasView.as_view(), name="assistant-schemas"),
    path(
        "assistants/<str:assistant_id>/subgraphs",
        assistants.AssistantSubgraphsView.as_view(),
        name="assistant-subgraphs",
    ),
    path(
        "assistants/<str:assistant_id>/subgraphs/<path:namespace>",
        assistants.AssistantSubgraphsNamespaceView.as_view(),
        name="assistant-subgraphs-namespace",
    ),
    path(
        "assistants/<str:assistant_id>/versions", assistants.AssistantVersionsView.as_view(), name="assistant-versions"
    ),
    path("assistants/<str:assistant_id>/latest", assistants.AssistantLatestView.as_view(), name="assistant-latest"),
    path(f"{T}/commands", thread_stream.ThreadCommandsView.as_view(), name="thread-commands"),
    path(f"{T}/stream/events", thread_stream.ThreadStreamEventsView.as_view(), name="thread-stream-events"),
    path(f"{T}/stream", thread_stream.ThreadJoinStreamView.as_view(), name="thread-join-stream"),
    path(f"{T}/runs", runs.RunCreateView.as_view(), name="run-create"),
    path(f"{T}/runs/crons", crons.ThreadCronCreateView.as_view(), name="thread-cron-create"),
    path(f"{T}/runs/stream", runs.RunStreamView.as_view(), name="run-stream"),
    path(f"{T}/runs/wait", runs.RunWaitView.as_view(), name="run-wait"),
    path(f"{T}/runs/regenerate/prepare", branches.RegeneratePrepareView.as_view(), name="run-regenerate-prepare"),
    path(
        f"{T}/runs/edit-regenerate/prepare",
        branches.EditRegeneratePrepareView.as_view(),
        name="run-edit-regenerate-prepare",
    ),
    path(f"{T}/branches", branches.BranchCreateView.as_view(), name="thread-branch"),
    path(R, runs.RunDetailView.as_view(), name="run-detail"),
    path(f"{R}/cancel", runs.RunCancelView.as_view(), name="run-cancel"),
    path(f"{R}/join", runs.RunJoinView.as_view(), name="run-join"),
    path(f"{R}/stream", runs.RunJoinStreamView.as_view(), name="run-join-stream"),
    path(f"{R}/messages", events.RunMessagesView.as_view(), name="run-messages"),
    path(f"{R}/events", events.RunEventsView.as_view(), name="run-events"),
    path(f"{T}/messages", events.ThreadMessagesView.as_view(), name="thread-messages"),
    path(f"{T}/messages/page", events.ThreadMessagesPageView.as_view(), name="thread-messages-page"),
    path(f"{T}/token-usage", events.ThreadTokenUsageView.as_view(), name="thread-token-usage"),
    # Stateless: no thread's runs to list, so no GET.
    path("runs", runs.RunCreateView.as_view(http_method_names=["post", "options"]), name="stateless-run-create"),
    path("runs/stream", runs.RunStreamView.as_view(), name="stateless-run-stream"),
    path("runs/wait", runs.RunWaitView.as_view(), name="stateless-run-wait"),
    path("runs/batch", runs.RunBatchView.as_view(), name="stateless-run-batch"),
    path("runs/cancel", runs.RunCancelManyView.as_view(), name="run-cancel-many"),
    path("runs/crons", crons.CronCreateView.as_view(), name="cron-create"),
    path("runs/crons/search", crons.CronSearchView.as_view(), name="cron-search"),
    path("runs/crons/count", crons.CronCountView.as_view(), name="cron-count"),
    path("runs/crons/<str:cron_id>", crons.CronDetailView.as_view(), name="cron-detail"),
]
