"""Django's middleware runs on the event loop under ASGI, and still does all it did: headers, CSRF, sessions."""

from __future__ import annotations

import re

import asgiref.sync
import httpx
import pytest
from django.contrib.auth import get_user_model

from deerflow_site.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def hops(monkeypatch) -> list[str]:
    """The functions every ``sync_to_async`` call carries to a thread, in order."""
    seen: list[str] = []
    original = asgiref.sync.SyncToAsync.__call__

    async def call(self, *args, **kwargs):
        seen.append(getattr(self.func, "__qualname__", repr(self.func)))
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(asgiref.sync.SyncToAsync, "__call__", call)
    return seen


def _client(**headers) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application), base_url="http://127.0.0.1", headers=headers
    )


async def test_an_api_request_takes_no_thread_hop_for_middleware_and_keeps_its_headers(owner, runtime, hops):
    async with _client(**{"x-api-key": owner.key}) as http:
        created = await http.post("/api/threads", json={})
        hops.clear()
        answer = await http.get(f"/api/threads/{created.json()['thread_id']}")

    assert answer.status_code == 200
    middleware_hops = [name for name in hops if "Middleware." in name]
    # API views are CSRF-exempt, decided inline; before, every middleware hopped twice (13 in all).
    assert middleware_hops == []
    assert answer.headers["x-content-type-options"] == "nosniff"  # SecurityMiddleware
    assert answer.headers["x-frame-options"] == "DENY"  # XFrameOptionsMiddleware
    assert answer.headers["cross-origin-opener-policy"] == "same-origin"
    assert int(answer.headers["content-length"]) == len(answer.content)  # CommonMiddleware


async def test_an_admin_login_over_asgi_checks_csrf_and_saves_its_session(runtime, hops):
    user = await get_user_model().objects.acreate_user("staffer", password="pw-123456", is_staff=True)
    async with _client() as http:
        page = await http.get("/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        assert "csrftoken" in http.cookies  # set by the CSRF middleware's response hook, inline

        refused = await http.post("/admin/login/", data={"username": "staffer", "password": "pw-123456"})
        assert refused.status_code == 403  # no token: the CSRF check still runs

        hops.clear()
        logged_in = await http.post(
            "/admin/login/?next=/admin/",
            data={"username": "staffer", "password": "pw-123456", "csrfmiddlewaretoken": token},
        )
        assert logged_in.status_code == 302, logged_in.text
        # The admin's views are not exempt: their CSRF check (it may read the form) takes the thread.
        assert "CsrfViewMiddleware.process_view" in hops
        # The login modified the session: saving it is I/O, so that response hook took the thread.
        assert "SessionMiddleware.process_response" in hops
        assert "sessionid" in http.cookies

        index = await http.get("/admin/")
    assert index.status_code == 200
    assert user.username in index.text
