from django.urls import path

from runs.consumers import RunStreamConsumer

websocket_urlpatterns = [
    path("ws/threads/<str:thread_id>/runs/<str:run_id>", RunStreamConsumer.as_asgi()),
]
