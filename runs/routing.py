from django.urls import path

from runs.consumers import RunStreamConsumer, ThreadStreamConsumer

websocket_urlpatterns = [
    path("ws/threads/<str:thread_id>/runs/<str:run_id>", RunStreamConsumer.as_asgi()),
    # Protocol v2: the SDKs derive it from the API base URL (…/api) and the SSE path.
    path("api/threads/<str:thread_id>/stream/events", ThreadStreamConsumer.as_asgi()),
]
