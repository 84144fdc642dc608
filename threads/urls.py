from django.urls import path

from core.routes import collection_routes, routes
from threads import api, api_context, api_projects, api_retention, api_state

T = "threads/<str:thread_id>"

urlpatterns = [
    # Before "threads/<str:thread_id>", which would otherwise take "prune" as an id.
    path("threads/prune", api_retention.ThreadPruneView.as_view(), name="thread-prune"),
    *collection_routes(
        "threads",
        "thread",
        create=api.ThreadCreateView,
        search=api.ThreadSearchView,
        count=api.ThreadCountView,
        detail=api.ThreadDetailView,
        id_param="thread_id",
    ),
    # "state/checkpoint" before "state/<str:checkpoint_id>", which would otherwise take "checkpoint" as an id.
    *routes(
        T,
        "thread",
        {
            "copy": api.ThreadCopyView,
            "state": api_state.ThreadStateView,
            "state/checkpoint": api_state.ThreadStateAtCheckpointView,
            "history": api_state.ThreadHistoryView,
            "storage": api_retention.ThreadStorageView,
            "goal": api_context.ThreadGoalView,
            "compact": api_context.ThreadCompactView,
            "move": api_projects.ThreadMoveView,
        },
    ),
    path(f"{T}/state/<str:checkpoint_id>", api_state.ThreadStateView.as_view(), name="thread-state-at"),
    path("projects", api_projects.ProjectListView.as_view(), name="project-list"),
    path("projects/<str:project_id>", api_projects.ProjectDetailView.as_view(), name="project-detail"),
]
