"""A full-mode process refuses a run on a delta thread at admission (409), instead of a run that ends ``error``."""

from __future__ import annotations

import httpx
import pytest
from asgiref.sync import sync_to_async

from deerflow_site.asgi import application
from runs.models import Run
from runs.services.admission import run_admit
from tests.checkpoints.support import OWN_DELTA_SPEC, accessor, invoke
from tests.threads.test_state_modes import MISMATCH, create_thread
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)

BODY = {"assistant_id": "lead_agent", "input": {"messages": [{"role": "user", "content": "hi"}]}}


@pytest.fixture
def delta_thread(owner) -> str:
    """A thread of the owner that a delta-mode graph wrote, on the full-mode suite's database."""
    thread_id = create_thread(owner)
    invoke(accessor("delta"), thread_id, "one")
    return thread_id


@pytest.mark.parametrize("route", ["runs", "runs/wait", "runs/stream"])
async def test_a_run_on_a_delta_thread_in_a_full_mode_process_is_409_and_admits_nothing(
    owner, runtime, delta_thread, route
):
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1/api") as http:
        answer = await http.post(f"/threads/{delta_thread}/{route}", json=BODY, headers={"x-api-key": owner.key})
    assert answer.status_code == 409, answer.text
    assert answer.json()["detail"].startswith(f"Thread {delta_thread}: {MISMATCH}")
    assert not await sync_to_async(Run.objects.filter(thread_id=delta_thread).exists)()


def test_a_graph_that_compiles_its_own_delta_channel_is_admitted_on_its_delta_thread(owner, settings):
    """deepagents' graphs store delta in a full-mode process too; their own gate lets them read it, so admission does."""
    settings.DEERFLOW = {
        **settings.DEERFLOW,
        "GRAPHS": {**settings.DEERFLOW["GRAPHS"], OWN_DELTA_SPEC.graph_id: OWN_DELTA_SPEC.import_path},
    }
    thread_id = create_thread(owner)
    invoke(accessor("full", spec=OWN_DELTA_SPEC), thread_id, "one", "two", "three", "four")
    thread = ThreadMeta.objects.get(pk=thread_id)

    run, _ = run_admit(
        owner=owner.user, thread=thread, assistant_id=OWN_DELTA_SPEC.graph_id, strategy="reject", metadata={}, kwargs={}
    )
    assert run.status == "pending"
