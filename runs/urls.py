from django.urls import path

from runs import api_assistants

urlpatterns = [
    path("assistants/search", api_assistants.AssistantSearchView.as_view(), name="assistant-search"),
    path("assistants/count", api_assistants.AssistantCountView.as_view(), name="assistant-count"),
    path("assistants/<str:assistant_id>", api_assistants.AssistantDetailView.as_view(), name="assistant-detail"),
    path("assistants/<str:assistant_id>/graph", api_assistants.AssistantGraphView.as_view(), name="assistant-graph"),
    path(
        "assistants/<str:assistant_id>/schemas",
        api_assistants.AssistantSchemasView.as_view(),
        name="assistant-schemas",
    ),
]
