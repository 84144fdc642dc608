from django.conf import settings
from django.contrib import admin
from django.urls import URLPattern, include, path
from drf_spectacular.views import SpectacularJSONAPIView, SpectacularSwaggerView

from deerflow_site.api import InfoView, OkView
from deerflow_site.metrics import MetricsView
from deerflow_site.views import landing
from runs.a2a.views import A2AView, AgentCardView
from runs.urls import urlpatterns as run_patterns
from store.urls import urlpatterns as store_patterns
from threads.urls import urlpatterns as thread_patterns


def route_family(name: str | None) -> str:
    """The langgraph.json ``http.disable_<family>`` that removes a route (by its URL name)."""
    name = name or ""
    if name == "mcp":
        return "mcp"
    if "a2a" in name:
        return "a2a"
    if name.startswith("assistant"):
        return "assistants"
    if "cron" in name or name.startswith(("run", "stateless-run")):
        return "runs"
    if name.startswith(("thread", "project")):
        return "threads"
    if name.startswith("store"):
        return "store"
    return "meta"


api_patterns: list[URLPattern] = [
    pattern
    for pattern in (
        path("ok", OkView.as_view(), name="ok"),
        path("info", InfoView.as_view(), name="info"),
        path("metrics", MetricsView.as_view(), name="metrics"),
        path("openapi.json", SpectacularJSONAPIView.as_view(), name="openapi"),
        path("docs", SpectacularSwaggerView.as_view(url_name="openapi"), name="docs"),
        *thread_patterns,
        *run_patterns,
        *store_patterns,
        # A2A: "run-a2a" is a thread route to custom auth, decided per method (each asks for its own action).
        path("a2a/<str:assistant_id>", A2AView.as_view(), name="run-a2a"),
        path(".well-known/agent-card.json", AgentCardView.as_view(), name="assistant-a2a-card"),
    )
    # langgraph.json's http.disable_*: those routes are not served (404, and absent from the schema).
    if route_family(pattern.name) not in settings.DEERFLOW["HTTP_DISABLED"]
]

urlpatterns = [
    path("", landing, name="landing"),
    path("admin/", admin.site.urls),
    path("api/", include(api_patterns)),
]

# Under /api/ even an unknown path or an unhandled error answers {"detail": ...}.
handler403 = "console.error_pages.permission_denied"
handler404 = "deerflow_site.api.not_found"
handler500 = "deerflow_site.api.server_error"
