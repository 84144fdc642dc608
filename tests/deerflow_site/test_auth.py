"""Identity: API keys on every route but /ok; bad keys are 401 with a detail."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from deerflow_site.models import ApiKey, hash_api_key

pytestmark = pytest.mark.django_db


def test_ok_needs_no_identity(anonymous):
    response = anonymous.get("/api/ok")
    assert response.status_code == 200
    assert response.json() == {"ok": True}


def test_ok_can_check_the_database(anonymous):
    assert anonymous.get("/api/ok?check_db=1").json() == {"ok": True, "services": {"database": "ok"}}


@pytest.mark.parametrize("path", ["/api/info", "/api/threads/search", "/api/assistants/search"])
def test_missing_key_is_401_with_detail(anonymous, path):
    response = anonymous.post(path, {}, format="json") if "search" in path else anonymous.get(path)
    assert response.status_code == 401
    assert "detail" in response.json()


def test_wrong_key_is_401(db):
    response = APIClient(HTTP_X_API_KEY="dfk_wrong").get("/api/info")
    assert response.status_code == 401
    assert response.json() == {"detail": "Invalid API key."}


def test_bearer_header_is_accepted(owner):
    response = APIClient(HTTP_AUTHORIZATION=f"Bearer {owner.key}").get("/api/info")
    assert response.status_code == 200


def test_revoked_key_is_rejected(owner):
    from django.utils import timezone

    ApiKey.objects.filter(digest=hash_api_key(owner.key)).update(revoked_at=timezone.now())
    assert owner.client.get("/api/info").status_code == 401


def test_a_deactivated_users_key_is_rejected(owner):
    owner.user.is_active = False
    owner.user.save(update_fields=["is_active"])
    assert owner.client.get("/api/info").status_code == 401


def test_the_key_identifies_its_own_user(owner, other):
    assert owner.client.get("/api/info").wsgi_request.user.pk == owner.user.pk
    assert other.client.get("/api/info").wsgi_request.user.pk == other.user.pk


def test_last_used_is_recorded_at_most_every_five_minutes(owner):
    from django.utils import timezone

    key = ApiKey.objects.filter(digest=hash_api_key(owner.key))
    key.update(last_used_at=None)
    assert owner.client.get("/api/info").status_code == 200
    first = key.get().last_used_at
    assert first is not None and timezone.now() - first < timedelta(minutes=1)

    recent = first - timedelta(minutes=4)
    key.update(last_used_at=recent)
    owner.client.get("/api/info")
    assert key.get().last_used_at == recent  # reads do not turn into writes

    key.update(last_used_at=first - timedelta(minutes=6))
    owner.client.get("/api/info")
    assert key.get().last_used_at >= first


def test_only_the_digest_is_stored(owner):
    key = ApiKey.objects.get(user=owner.user)
    assert key.digest == hash_api_key(owner.key)
    assert owner.key not in (key.digest, key.prefix, key.name)


def test_create_api_key_creates_the_user_and_prints_the_key_last():
    out = io.StringIO()
    call_command("create_api_key", "carol", stdout=out)
    key = out.getvalue().strip().splitlines()[-1]
    assert key.startswith("dfk_")
    response = APIClient(HTTP_X_API_KEY=key).get("/api/info")
    assert response.status_code == 200
    # A second call makes a second, different, working key for the same user.
    out2 = io.StringIO()
    call_command("create_api_key", "carol", stdout=out2)
    assert out2.getvalue().strip().splitlines()[-1] != key
    assert ApiKey.objects.filter(user__username="carol").count() == 2


def test_bootstrap_creates_admin_once(db):
    out = io.StringIO()
    call_command("bootstrap", stdout=out)
    text = out.getvalue()
    assert "password" in text and "dfk_" in text
    again = io.StringIO()
    call_command("bootstrap", stdout=again)
    assert "dfk_" not in again.getvalue()
