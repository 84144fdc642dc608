"""Run feedback routes: upsert, create, list, stats, delete (own and by id), the by-run list and the feed's verdicts."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.models import Feedback, Run
from runs.services.events import run_events_append
from tests.helpers import at_once
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)


def thread_with_run(persona, *, runs: int = 1) -> tuple[str, list[str]]:
    """A thread of ``persona``'s with finished runs; their ids."""
    thread = ThreadMeta.objects.create(thread_id=f"fb-{uuid.uuid4().hex}", owner=persona.user)
    ids = [uuid.uuid4().hex for _ in range(runs)]
    for run_id in ids:
        Run.objects.create(
            run_id=run_id, thread=thread, owner=persona.user, assistant_id="lead_agent", status="success"
        )
    return thread.thread_id, ids


def url(thread_id: str, run_id: str, suffix: str = "") -> str:
    return f"/api/threads/{thread_id}/runs/{run_id}/feedback{suffix}"


def test_put_creates_then_replaces_the_callers_one_verdict(owner):
    thread_id, (run_id,) = thread_with_run(owner)

    first = owner.client.put(url(thread_id, run_id), {"rating": 1, "comment": "good"}, format="json")
    assert first.status_code == 200, first.content
    body = first.json()
    assert {k: body[k] for k in ("run_id", "thread_id", "user_id", "rating", "comment", "message_id")} == {
        "run_id": run_id,
        "thread_id": thread_id,
        "user_id": owner.user.username,
        "rating": 1,
        "comment": "good",
        "message_id": None,
    }
    second = owner.client.put(url(thread_id, run_id), {"rating": -1}, format="json")
    assert second.status_code == 200, second.content
    assert second.json()["feedback_id"] == body["feedback_id"]
    assert (second.json()["rating"], second.json()["comment"]) == (-1, None)  # an upsert replaces the comment too
    assert Feedback.objects.count() == 1


def test_post_creates_with_a_message_id_and_a_second_post_is_409(owner):
    thread_id, (run_id,) = thread_with_run(owner)

    created = owner.client.post(url(thread_id, run_id), {"rating": -1, "message_id": "m-1"}, format="json")
    assert created.status_code == 200, created.content
    assert (created.json()["rating"], created.json()["message_id"], created.json()["comment"]) == (-1, "m-1", None)
    again = owner.client.post(url(thread_id, run_id), {"rating": 1}, format="json")
    assert again.status_code == 409
    assert again.json() == {"detail": f"Feedback on run {run_id} already exists; PUT it to change it."}
    assert list(Feedback.objects.values_list("rating", flat=True)) == [-1]


@pytest.mark.parametrize("rating", [0, 2, -2, True, "1", 1.0, None])
@pytest.mark.parametrize("method", ["put", "post"])
def test_a_rating_other_than_plus_or_minus_one_is_422_and_writes_nothing(owner, method, rating):
    thread_id, (run_id,) = thread_with_run(owner)

    answer = getattr(owner.client, method)(url(thread_id, run_id), {"rating": rating}, format="json")

    assert answer.status_code == 422, answer.content
    assert answer.json()["detail"] in ("rating: rating must be +1 or -1", "rating: This field may not be null.")
    assert not Feedback.objects.exists()


def test_a_missing_rating_or_an_overlong_message_id_is_422(owner):
    thread_id, (run_id,) = thread_with_run(owner)
    assert owner.client.put(url(thread_id, run_id), {"comment": "x"}, format="json").json()["detail"] == (
        "rating: This field is required."
    )
    long_id = owner.client.post(url(thread_id, run_id), {"rating": 1, "message_id": "m" * 65}, format="json")
    assert long_id.status_code == 422 and long_id.json()["detail"].startswith("message_id:")
    assert not Feedback.objects.exists()


def test_list_and_stats_count_every_verdict_on_the_run(owner, other):
    thread_id, (run_id, quiet_run) = thread_with_run(owner, runs=2)
    owner.client.put(url(thread_id, run_id), {"rating": 1}, format="json")
    # A verdict of someone else's on the owner's run (DeerFlow's shared rows arrive so, by import).
    Feedback.objects.create(feedback_id="theirs", run_id=run_id, thread_id=thread_id, owner=other.user, rating=-1)

    listed = owner.client.get(url(thread_id, run_id))
    assert listed.status_code == 200
    assert sorted((f["user_id"], f["rating"]) for f in listed.json()) == sorted(
        [(owner.user.username, 1), (other.user.username, -1)]
    )
    stats = owner.client.get(url(thread_id, run_id, "/stats"))
    assert stats.json() == {"run_id": run_id, "total": 2, "positive": 1, "negative": 1}
    assert owner.client.get(url(thread_id, quiet_run, "/stats")).json() == {
        "run_id": quiet_run,
        "total": 0,
        "positive": 0,
        "negative": 0,
    }
    assert owner.client.get(url(thread_id, quiet_run)).json() == []
    by_run = owner.client.get(f"/api/runs/{run_id}/feedback")
    assert by_run.status_code == 200 and by_run.json() == listed.json()


def test_listing_costs_the_same_queries_for_one_verdict_or_many(owner):
    thread_id, (run_id,) = thread_with_run(owner)
    Feedback.objects.create(feedback_id="f0", run_id=run_id, thread_id=thread_id, owner=owner.user, rating=1)
    owner.client.get(url(thread_id, run_id))  # the key's first use of the minute writes its last_used_at
    with CaptureQueriesContext(connection) as one:
        owner.client.get(url(thread_id, run_id))
    for i in range(5):
        persona_user = type(owner.user).objects.create(username=f"u{i}-{uuid.uuid4().hex[:6]}")
        Feedback.objects.create(
            feedback_id=f"f{i + 1}", run_id=run_id, thread_id=thread_id, owner=persona_user, rating=1
        )
    with CaptureQueriesContext(connection) as six:
        assert len(owner.client.get(url(thread_id, run_id)).json()) == 6
    assert len(six.captured_queries) == len(one.captured_queries)


def test_delete_withdraws_the_callers_verdict_then_answers_404(owner, other):
    thread_id, (run_id,) = thread_with_run(owner)
    owner.client.put(url(thread_id, run_id), {"rating": 1}, format="json")
    Feedback.objects.create(feedback_id="theirs", run_id=run_id, thread_id=thread_id, owner=other.user, rating=-1)

    gone = owner.client.delete(url(thread_id, run_id))
    assert gone.status_code == 200 and gone.json() == {"success": True}
    assert list(Feedback.objects.values_list("pk", flat=True)) == ["theirs"]  # only the caller's own went
    again = owner.client.delete(url(thread_id, run_id))
    assert again.status_code == 404
    assert again.json() == {"detail": f"No feedback of yours on run {run_id}"}


def test_delete_by_id_takes_only_the_callers_own_on_that_run(owner, other):
    thread_id, (run_id, second_run) = thread_with_run(owner, runs=2)
    mine = owner.client.post(url(thread_id, run_id), {"rating": 1}, format="json").json()["feedback_id"]
    Feedback.objects.create(feedback_id="theirs", run_id=run_id, thread_id=thread_id, owner=other.user, rating=-1)

    assert owner.client.delete(url(thread_id, second_run, f"/{mine}")).status_code == 404  # another run's
    refused = owner.client.delete(url(thread_id, run_id, "/theirs"))
    assert refused.status_code == 404 and refused.json() == {"detail": "Feedback theirs not found"}
    assert owner.client.delete(url(thread_id, run_id, f"/{mine}")).json() == {"success": True}
    assert list(Feedback.objects.values_list("pk", flat=True)) == ["theirs"]


def test_another_users_thread_or_run_is_404_on_every_route_and_writes_nothing(owner, other):
    thread_id, (run_id,) = thread_with_run(owner)
    mine = owner.client.put(url(thread_id, run_id), {"rating": 1}, format="json").json()["feedback_id"]
    calls = [
        ("get", url(thread_id, run_id), None),
        ("put", url(thread_id, run_id), {"rating": -1}),
        ("post", url(thread_id, run_id), {"rating": -1}),
        ("delete", url(thread_id, run_id), None),
        ("get", url(thread_id, run_id, "/stats"), None),
        ("delete", url(thread_id, run_id, f"/{mine}"), None),
    ]
    for method, path, body in calls:
        answer = getattr(other.client, method)(path, body, format="json")
        assert answer.status_code == 404, (method, path, answer.content)
        assert answer.json() == {"detail": f"Thread {thread_id} not found"}
    by_run = other.client.get(f"/api/runs/{run_id}/feedback")
    assert by_run.status_code == 404 and by_run.json() == {"detail": f"Run {run_id} not found"}
    assert list(Feedback.objects.values_list("pk", "rating")) == [(mine, 1)]


def test_a_missing_run_or_a_run_of_another_thread_is_404(owner):
    thread_id, (run_id,) = thread_with_run(owner)
    other_thread, (elsewhere,) = thread_with_run(owner)
    for path in (url(thread_id, "no-such-run"), url(thread_id, elsewhere), url(other_thread, run_id, "/stats")):
        answer = owner.client.put(path, {"rating": 1}, format="json") if "stats" not in path else owner.client.get(path)
        assert answer.status_code == 404, path
        assert answer.json()["detail"].startswith("Run ")
    assert owner.client.get("/api/runs/no-such-run/feedback").json() == {"detail": "Run no-such-run not found"}
    assert not Feedback.objects.exists()


def test_no_credentials_is_401(anonymous, owner):
    thread_id, (run_id,) = thread_with_run(owner)
    assert anonymous.get(url(thread_id, run_id)).status_code == 401
    assert anonymous.get(f"/api/runs/{run_id}/feedback").status_code == 401


def test_racing_upserts_leave_one_verdict(owner):
    thread_id, (run_id,) = thread_with_run(owner)

    answers = at_once(lambda: owner.client.put(url(thread_id, run_id), {"rating": 1}, format="json").status_code, 4)

    assert answers == [200] * 4
    assert Feedback.objects.count() == 1


def test_deleting_the_run_or_the_thread_deletes_its_feedback(owner):
    thread_id, (run_id, kept_run) = thread_with_run(owner, runs=2)
    for run in (run_id, kept_run):
        owner.client.put(url(thread_id, run), {"rating": 1}, format="json")

    assert owner.client.delete(f"/api/threads/{thread_id}/runs/{run_id}").status_code in (200, 202, 204)
    assert list(Feedback.objects.values_list("run_id", flat=True)) == [kept_run]
    assert owner.client.delete(f"/api/threads/{thread_id}").status_code in (200, 202, 204)
    assert not Feedback.objects.exists()


def _answer(text: str) -> dict:
    return {"event_type": "llm.ai.response", "content": {"type": "ai", "content": text}}


def test_the_messages_feed_carries_the_callers_verdict_on_each_runs_last_answer(owner):
    thread_id, (rated, unrated) = thread_with_run(owner, runs=2)
    human = {"event_type": "llm.human.input", "content": {"type": "human", "content": "hi"}}
    run_events_append(thread_id=thread_id, run_id=rated, events=[human, _answer("a"), _answer("b")])
    run_events_append(thread_id=thread_id, run_id=unrated, events=[human, _answer("c")])
    verdict = owner.client.put(url(thread_id, rated), {"rating": -1, "comment": "meh"}, format="json").json()

    feed = owner.client.get(f"/api/threads/{thread_id}/messages").json()

    marked = {row["seq"]: row["feedback"] for row in feed if "feedback" in row}
    assert marked == {
        3: {"feedback_id": verdict["feedback_id"], "rating": -1, "comment": "meh"},
        5: None,
    }
    # A page that stops before a run's last answer marks nothing of that run.
    page = owner.client.get(f"/api/threads/{thread_id}/messages", {"before_seq": 3}).json()
    assert [row["seq"] for row in page] == [1, 2] and not any("feedback" in row for row in page)
