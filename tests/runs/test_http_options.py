"""langgraph.json's http.configurable_headers and http.disable_webhooks, in the services that apply them."""

from __future__ import annotations

import pytest

from deerflow_site.urls import route_family
from runs.services.run_request import RunRequest, headers_matching
from runs.services.webhooks import webhook_after_commit

RULES = {"includes": ["x-tenant-*", "x-user-id", "authorization", "x-api-key"], "excludes": ["x-tenant-secret"]}


def test_only_the_included_headers_and_never_a_secret_are_copied():
    headers = {
        "X-Tenant-Id": "acme",
        "x-tenant-region": "eu",
        "x-tenant-secret": "s",
        "x-user-id": "u1",
        "x-other": "o",
        "Authorization": "Bearer t",
        "x-api-key": "k",
    }
    assert headers_matching(headers, RULES) == {
        "x-tenant-id": "acme",
        "x-tenant-region": "eu",
        "x-user-id": "u1",
    }
    assert headers_matching(headers, None) == {}


def test_the_bodys_configurable_wins_over_a_copied_header():
    run = RunRequest("lead_agent", config={"configurable": {"x-user-id": "from-body"}})
    merged = run.with_headers({"x-user-id": "from-header", "x-tenant-id": "acme"})
    assert merged.config["configurable"] == {"x-user-id": "from-body", "x-tenant-id": "acme"}
    assert run.with_headers({}) is run


@pytest.mark.django_db
def test_disabled_webhooks_are_never_handed_over(settings, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as sent:
        webhook_after_commit(run_id="r", url="https://example.com/hook")
    assert len(sent) == 1
    settings.DEERFLOW = {**settings.DEERFLOW, "WEBHOOKS_DISABLED": True}
    with django_capture_on_commit_callbacks() as sent:
        webhook_after_commit(run_id="r", url="https://example.com/hook")
    assert sent == []


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("assistant-search", "assistants"),
        ("cron-create", "runs"),
        ("thread-cron-create", "runs"),
        ("stateless-run-wait", "runs"),
        ("run-cancel-many", "runs"),
        ("thread-state", "threads"),
        ("project-list", "threads"),
        ("store-items", "store"),
        ("ok", "meta"),
        ("openapi", "meta"),
    ],
)
def test_each_route_belongs_to_the_family_whose_disable_key_removes_it(name, family):
    assert route_family(name) == family
