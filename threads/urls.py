from django.urls import path

from threads import api, api_context, api_projects, api_retention, api_state

urlpatterns = [
    path("threads", api.ThreadCreateView.as_view(), name="thread-create"),
    path("threads/search", api.ThreadSearchView.as_view(), name="thread-search"),
    path("threads/count", api.ThreadCountView.as_view(), name="thread-count"),
    # Before "threads/<str:thread_id>", which would otherwise take "prune" as an id.
    path("threads/prune", api_retention.ThreadPruneView.as_view(), name="thread-prune"),
    path("threads/<str:thread_id>", api.ThreadDetailView.as_view(), name="thread-detail"),
    path("threads/<str:thread_id>/copy", api.ThreadCopyView.as_view(), name="thread-copy"),
    path("threads/<str:thread_id>/state", api_state.ThreadStateView.as_view(), name="thread-state"),
    path(
        "threads/<str:thread_id>/state/checkpoint",
        api_state.ThreadStateAtCheckpointView.as_view(),
        name="thread-state-checkpoint",
    ),
    path(
        "threads/<str:thread_id>/state/<str:checkpoint_id>",
        api_state.ThreadStateView.as_view(),
        name="thread-state-at",
    ),
    path("threads/<str:thread_id>/history", api_state.ThreadHistoryView.as_view(), name="thread-history"),
    path("threads/<str:thread_id>/storage", api_retention.ThreadStorageView.as_view(), name="thread-storage"),
    path("threads/<str:thread_id>/goal", api_context.ThreadGoalView.as_view(), name="thread-goal"),
    path("threads/<str:thread_id>/compact", api_context.ThreadCompactView.as_view(), name="thread-compact"),
    path("threads/<str:thread_id>/move", api_projects.ThreadMoveView.as_view(), name="thread-move"),
    path("projects", api_projects.ProjectListView.as_view(), name="project-list"),
    path("projects/<str:project_id>", api_projects.ProjectDetailView.as_view(), name="project-detail"),
]
