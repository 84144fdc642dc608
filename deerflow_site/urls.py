from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path
from drf_spectacular.views import SpectacularJSONAPIView, SpectacularSwaggerView

from deerflow_site.api import InfoView, OkView
from deerflow_site.metrics import MetricsView
from deerflow_site.views import landing

api_patterns: list[URLPattern | URLResolver] = [
    path("ok", OkView.as_view(), name="ok"),
    path("info", InfoView.as_view(), name="info"),
    path("metrics", MetricsView.as_view(), name="metrics"),
    path("openapi.json", SpectacularJSONAPIView.as_view(), name="openapi"),
    path("docs", SpectacularSwaggerView.as_view(url_name="openapi"), name="docs"),
    path("", include("threads.urls")),
    path("", include("runs.urls")),
    path("", include("store.urls")),
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
