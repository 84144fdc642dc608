"""Every admin route × every persona short of a superuser, generated from the admin's URL conf.

A new admin route fails ``test_every_admin_route_is_in_the_matrix`` until
it is listed here. Personas: no session, a logged-in user who is not staff,
and staff holding no permission. The first two are sent to the login page
from every route but the login itself; staff without permissions get a 403
(or the 404 Django's admin gives for an app it hides) from every page that
shows or changes data, and the index lists only the settings page, the one
page about no one's data. No page answers any of them with one of the
seeded objects' ids or markers, and their POSTs change nothing. A
superuser's GET of each page answers what the matrix says it is for
everyone allowed (mostly a 200), so the ids are real and a refusal cannot
come from a badly filled path.
"""

from __future__ import annotations

import uuid

import pytest
from django.contrib import admin
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.contenttypes.models import ContentType
from django.test import Client
from django.urls import URLPattern, URLResolver

from deerflow_site.models import ApiKey
from runs.models import Assistant, Cron, Run, RunEvent
from tests.console import staff
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)

REFUSED = "refused"  # staff without permissions: 403, or the 404 Django's admin gives for an app it hides
OWN = "own"  # a page about the user themself (their password) or about nobody's data
STAFF = "staff"  # any staff account: the backend, channel mode and health panels; no user's data
REDIRECT = "redirect"  # <object_id>/ redirects to its change page, which refuses
ACTION = "action"  # a POST-only action (405 on GET for everyone); staff without permission get 403 on POST
LOGIN = "login"  # the login page: answers everyone (a logged-in staff member is sent on to the index)
LOGOUT = "logout"  # harmless for everyone

MARKER = "matrix-secret-" + uuid.uuid4().hex[:8]

# What a superuser's GET answers: 200 unless the page is something else for everyone.
NOBODY = {403}  # the console's admins are read-only: no add, and no delete of threads' data here
MODEL_ROUTES = {
    "": (REFUSED, {200}),  # changelist
    "add/": (REFUSED, {200, 403}),
    "<path:object_id>/": (REDIRECT, {302}),
    "<path:object_id>/change/": (REFUSED, {200}),
    "<path:object_id>/delete/": (REFUSED, {200, 403}),
    "<path:object_id>/history/": (REFUSED, {200}),
}
MODELS = {  # admin prefix -> the key of its object in the seeded ids
    "auth/group/": "group",
    "auth/user/": "user",
    "deerflow_site/apikey/": "apikey",
    "threads/threadmeta/": "thread",
    "runs/run/": "run",
    "runs/runevent/": "event",
    "runs/assistant/": "assistant",
    "runs/cron/": "cron",
    "admin/logentry/": "logentry",  # the staff-action log (console/audit.py)
}

MATRIX: dict[str, tuple[str, set[int]]] = {
    "": (OWN, {200}),  # the index: no app listed
    "login/": (LOGIN, {302}),
    "logout/": (LOGOUT, {302, 405}),
    "password_change/": (OWN, {200}),
    "password_change/done/": (OWN, {200}),
    "jsi18n/": (OWN, {200}),
    "autocomplete/": (REFUSED, NOBODY),  # no admin field uses autocomplete
    "r/<path:content_type_id>/<path:object_id>/": (REFUSED, {404}),  # no model has a page outside the admin
    "^(?P<app_label>auth|deerflow_site|threads|admin|runs)/$": (REFUSED, {200}),
    "(?P<url>.*)$": (REFUSED, {404}),  # the catch-all
    "auth/user/<id>/password/": (REFUSED, {200}),
    "threads/threadmeta/<path:object_id>/export/": (REFUSED, {200}),
    "runs/run/<path:object_id>/cancel/": (REFUSED, {200}),  # GET: the confirmation page
    "auth/user/<path:object_id>/erase/": (REFUSED, {200}),  # GET: the preview (the seeded user is not staff)
    "runs/health/": (REFUSED, {200}),
    "threads/threadmeta/compare/": (REFUSED, {200}),
    "checkpoints/store-items/": (REFUSED, {200}),
    "checkpoints/settings/": (STAFF, {200}),
    "checkpoints/threads/<str:thread_id>/lineage/": (REFUSED, {200}),
    "checkpoints/threads/<str:thread_id>/checkpoints/<str:checkpoint_id>/": (REFUSED, {200}),
    "checkpoints/retention/": (REFUSED, {200}),
    "checkpoints/storage/": (REFUSED, {200}),
    **{prefix + route: case for prefix in MODELS for route, case in MODEL_ROUTES.items()},
}


def admin_routes() -> list[str]:
    """Every route of the admin site, as its URL conf spells it (relative to /admin/)."""
    found: list[str] = []

    def walk(patterns, prefix: str) -> None:
        for entry in patterns:
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, prefix + str(entry.pattern))
            elif isinstance(entry, URLPattern):
                found.append(prefix + str(entry.pattern))

    walk(admin.site.urls[0], "")
    return found


def test_every_admin_route_is_in_the_matrix():
    routes = admin_routes()
    assert sorted(set(routes) - set(MATRIX)) == [], "admin routes missing from the matrix"
    assert sorted(set(MATRIX) - set(routes)) == [], "matrix entries no admin route has"


@pytest.fixture
def world(owner):
    """One object of every admin model, each carrying MARKER where it has text; their ids."""
    client = owner.client
    thread = client.post("/api/threads", {"metadata": {"marker": MARKER}}, format="json").json()["thread_id"]
    written = client.post(
        f"/api/threads/{thread}/state", {"values": {"title": MARKER}, "as_node": "agent"}, format="json"
    )
    assert written.status_code == 200, written.content
    assistant = client.post("/api/assistants", {"graph_id": "lead_agent", "name": MARKER}, format="json").json()
    cron = client.post(
        f"/api/threads/{thread}/runs/crons",
        {"assistant_id": "lead_agent", "schedule": "0 0 * * *", "metadata": {"marker": MARKER}},
        format="json",
    ).json()
    from runs.services.admission import run_admit
    from runs.services.events import run_events_append

    run, _ = run_admit(
        owner=owner.user,
        thread=ThreadMeta.objects.get(pk=thread),
        assistant_id="lead_agent",
        strategy="reject",
        metadata={"marker": MARKER},
        kwargs={"input": {"messages": [{"role": "user", "content": MARKER}]}},
    )
    run_events_append(thread_id=thread, run_id=run.run_id, events=[{"event_type": "note", "content": MARKER}])
    group = Group.objects.create(name=MARKER)
    entry = LogEntry.objects.log_actions(
        user_id=owner.user.pk,
        queryset=[ThreadMeta.objects.get(pk=thread)],
        action_flag=CHANGE,
        change_message=f"Cancelled run (interrupt): {MARKER}",
        single_object=True,
    )
    ids = {
        "thread": thread,
        "checkpoint": written.json()["checkpoint"]["checkpoint_id"],
        "run": run.run_id,
        "event": str(RunEvent.objects.get(run_id=run.run_id).pk),
        "assistant": assistant["assistant_id"],
        "cron": cron["cron_id"],
        "apikey": str(ApiKey.objects.filter(user=owner.user).first().pk),
        "user": str(owner.user.pk),
        "group": str(group.pk),
        "logentry": str(entry.pk),
        "content_type": str(ContentType.objects.get_for_model(ThreadMeta).pk),
    }
    assert Cron.objects.filter(pk=ids["cron"]).exists() and Assistant.objects.filter(pk=ids["assistant"]).exists()
    return ids


def fill(route: str, ids: dict[str, str]) -> str:
    """The path of ``route`` with the seeded objects' ids in its parameters."""
    if route == "(?P<url>.*)$":
        return f"/admin/threads/{ids['thread']}/"
    path = route.replace("^(?P<app_label>auth|deerflow_site|threads|admin|runs)/$", "threads/")
    if route.startswith("r/"):
        path = f"r/{ids['content_type']}/{ids['thread']}/"
    for prefix, key in MODELS.items():
        if path.startswith(prefix):
            path = path.replace("<path:object_id>", ids[key])
    path = path.replace("<id>", ids["user"]).replace("<str:thread_id>", ids["thread"])
    path = path.replace("<str:checkpoint_id>", ids["checkpoint"])
    if path == "autocomplete/":
        path += "?app_label=threads&model_name=threadmeta&field_name=thread&term=m"
    if path == "checkpoints/retention/":
        path += f"?ids={ids['thread']}"
    return "/admin/" + path


def personas() -> dict[str, Client]:
    user = get_user_model().objects.create_user(f"plain-{uuid.uuid4().hex[:8]}")
    logged_in = Client()
    logged_in.force_login(user)
    return {"no session": Client(), "not staff": logged_in, "staff without permissions": staff()}


def snapshot() -> dict[str, int]:
    return {
        model.__name__: model.objects.count()
        for model in (ThreadMeta, Run, RunEvent, Assistant, Cron, ApiKey, Group, get_user_model())
    }


def expected_for(name: str, kind: str) -> set[int]:
    if kind == LOGOUT:
        return {302, 405}
    if kind == LOGIN:
        return {302} if name == "staff without permissions" else {200}
    if name != "staff without permissions":
        return {302}  # to the login page
    if kind == ACTION:
        return {405}
    if kind in (OWN, STAFF):
        return {200}
    if kind == REDIRECT:
        return {302}  # to the change page, which refuses
    return {403, 404}


def test_no_persona_short_of_permission_reaches_an_admin_page_or_its_data(owner, world):
    superuser, callers = staff(superuser=True), personas()
    before = snapshot()
    failures: list[str] = []
    for route, (kind, superuser_sees) in MATRIX.items():
        path = fill(route, world)
        seen = superuser.get(path).status_code
        if seen not in superuser_sees:
            failures.append(f"superuser GET {path}: {seen}, expected {sorted(superuser_sees)}")
        for name, client in callers.items():
            answer = client.get(path)
            expected = expected_for(name, kind)
            if answer.status_code not in expected:
                failures.append(f"{name} GET {path}: {answer.status_code}, expected {sorted(expected)}")
            if answer.status_code == 302 and kind not in (LOGIN, LOGOUT):
                location = answer["Location"]
                wanted = (
                    path + "change/" if kind == REDIRECT and name == "staff without permissions" else "/admin/login/"
                )
                if not location.startswith(wanted):
                    failures.append(f"{name} GET {path}: redirected to {location}, not {wanted}")
            body = answer.content.decode(errors="replace")
            if leaked := [needle for needle in (MARKER, *world.values()) if len(needle) > 3 and needle in body]:
                if kind != OWN or name != "staff without permissions":
                    failures.append(f"{name} GET {path}: the answer shows {leaked}")
            if kind in (REFUSED, REDIRECT, ACTION, STAFF):
                written = client.post(path, {"action": "delete_selected", "_selected_action": list(world.values())})
                refused = {302} if name != "staff without permissions" else {403, 404, 405}
                if kind == STAFF and name == "staff without permissions":
                    refused = {200, 405}  # the page again: it has no form
                if kind == REDIRECT and name == "staff without permissions":
                    refused = {302}
                if written.status_code not in refused:
                    failures.append(f"{name} POST {path}: {written.status_code}, expected {sorted(refused)}")
    assert failures == [], "\n".join(failures)
    assert snapshot() == before  # nobody's POST changed anything


def test_staff_without_permissions_see_only_the_settings_page_on_the_index(world):
    page = staff().get("/admin/").content.decode()
    everything = staff(superuser=True).get("/admin/").content.decode()
    assert "Checkpoint settings" in page  # the STAFF page
    for link in [f'href="/admin/{prefix}"' for prefix in MODELS] + ['href="/admin/checkpoints/storage/"']:
        assert link in everything, link  # what a superuser is shown…
        assert link not in page, link  # …and staff without permissions are not
