"""GET /metrics (the queue and this process's worker, Prometheus or JSON) and GET /ok?check_db=1's services."""

from __future__ import annotations

import re
import uuid

import pytest

from runs.models import Run
from threads.models import RunStatus, ThreadMeta

pytestmark = pytest.mark.django_db


def runs(owner, *statuses: str) -> None:
    for status in statuses:
        thread = ThreadMeta.objects.create(thread_id=uuid.uuid4().hex, owner=owner.user)
        Run.objects.create(
            run_id=uuid.uuid4().hex, thread=thread, owner=owner.user, assistant_id="lead_agent", status=status
        )


def gauges(text: str) -> dict[str, float]:
    return {name: float(value) for name, value in re.findall(r"^(\w+) (\S+)$", text, flags=re.M)}


def test_metrics_need_credentials(anonymous):
    assert anonymous.get("/api/metrics").status_code == 401


def test_metrics_count_the_queue_in_prometheus_text(owner):
    runs(owner, RunStatus.PENDING, RunStatus.PENDING, RunStatus.RUNNING, RunStatus.QUEUED, RunStatus.SUCCESS)
    answer = owner.client.get("/api/metrics")
    assert answer.status_code == 200
    assert answer["Content-Type"].startswith("text/plain; version=0.0.4")
    text = answer.content.decode()
    assert "# TYPE lg_api_num_pending_runs gauge" in text
    found = gauges(text)
    assert (found["lg_api_num_pending_runs"], found["lg_api_num_running_runs"]) == (2, 1)
    assert found["deerflow_num_queued_runs"] == 1 and found["deerflow_num_threads"] == 5
    assert found["lg_api_pending_runs_wait_time_max"] >= 0
    workers = (found["lg_api_workers_max"], found["lg_api_workers_active"], found["lg_api_workers_available"])
    assert workers[2] == workers[0] - workers[1] >= 0


def test_metrics_answer_json_when_asked(owner):
    runs(owner, RunStatus.RUNNING)
    answer = owner.client.get("/api/metrics", {"format": "json"})
    assert answer.status_code == 200 and answer.json()["lg_api_num_running_runs"] == 1


def test_ok_without_check_db_is_a_bare_liveness_answer(anonymous):
    assert anonymous.get("/api/ok").json() == {"ok": True}


def test_ok_with_check_db_names_each_dependency(anonymous, settings, redis_url):
    config = settings.DEERFLOW_CONFIG
    settings.DEERFLOW_CONFIG = config.model_copy(
        update={"stream_bridge": config.stream_bridge.model_copy(update={"type": "redis"})}
    )
    answer = anonymous.get("/api/ok", {"check_db": "1"})
    assert (answer.status_code, answer.json()) == (200, {"ok": True, "services": {"database": "ok", "redis": "ok"}})


def test_ok_with_check_db_is_503_naming_the_dependency_that_fails(anonymous, settings, monkeypatch):
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")  # nothing listens on port 1
    config = settings.DEERFLOW_CONFIG
    settings.DEERFLOW_CONFIG = config.model_copy(
        update={"channel_layer": config.channel_layer.model_copy(update={"type": "redis"})}
    )
    answer = anonymous.get("/api/ok", {"check_db": "1"})
    assert answer.status_code == 503
    assert answer.json() == {"ok": False, "services": {"database": "ok", "redis": "error: ConnectionError"}}
