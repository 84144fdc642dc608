"""``LANGGRAPH_AES_JSON_KEYS``: chosen JSON keys sealed with ``LANGGRAPH_AES_KEY`` wherever they appear.

Unit checks of the start-up rules and the sealing, then the real ASGI app in
process on the pass's backend: a thread, an assistant, a run, a cron and a
Store item carrying an ``api_key`` — every API answer shows it, no column of
the database holds it, filters on it are a 422 naming it, and a key rotation
(``manage.py reencrypt``) leaves everything readable with the old key gone.
"""

from __future__ import annotations

import json
import uuid

import pytest
from channels.db import database_sync_to_async as db
from django.core.management import call_command
from django.db import connection

from checkpoints.encryption import Keyring, KeyringCipher, KeyringError, json_keys_from, key_id
from checkpoints.runtime import close_sync_resources
from core.aes_json import PREFIX, AesJsonKeys, SealedKeyFilter, parse_keys
from tests.checkpoints.support import empty_checkpoint_tables, empty_store
from tests.helpers import in_process_api
from threads.models import ThreadMeta

KEY_A = b"A" * 32
KEY_B = b"B" * 32
SECRET = "sk-live-51f0c9e2d4"  # the api_key's value: never stored in the clear


def human(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


# -- start-up rules and the sealing itself ------------------------------------------------


@pytest.mark.backend_free
def test_the_list_is_checked_at_start():
    keyring = Keyring(KEY_A)
    assert json_keys_from({}, keyring, handlers=None, index_fields=None) is None
    assert json_keys_from({"LANGGRAPH_AES_JSON_KEYS": " , "}, keyring, handlers=None, index_fields=None) is None
    custom = json_keys_from(
        {"LANGGRAPH_AES_JSON_KEYS": "api_key, secret_token"}, keyring, handlers=None, index_fields=["text"]
    )
    assert custom is not None and custom.json_keys is not None
    assert custom.json_keys.keys == {"api_key", "secret_token"} and custom.seals_json and not custom.seals_blobs
    refusals = [
        ({"LANGGRAPH_AES_JSON_KEYS": "api_key"}, None, None, None, "is set without LANGGRAPH_AES_KEY"),
        ({"LANGGRAPH_AES_JSON_KEYS": "api_key"}, keyring, object(), None, "use one of the two"),
        (
            {"LANGGRAPH_AES_JSON_KEYS": "api_key,owner,langgraph_plan"},
            keyring,
            None,
            None,
            "lists langgraph_plan, owner",
        ),
        ({"LANGGRAPH_AES_JSON_KEYS": "__encryption_context__"}, keyring, None, None, "the server's own"),
        ({"LANGGRAPH_AES_JSON_KEYS": "api_key"}, keyring, None, ["profile.api_key"], "which store.index embeds"),
    ]
    for env, ring, handlers, fields, said in refusals:
        with pytest.raises(KeyringError, match=said):
            json_keys_from(env, ring, handlers=handlers, index_fields=fields)


@pytest.mark.backend_free
def test_listed_keys_are_sealed_at_any_depth_and_nothing_else_changes():
    keys = AesJsonKeys(parse_keys("api_key,token"), KeyringCipher(Keyring(KEY_A)))
    plain = {
        "api_key": SECRET,
        "team": "blue",
        "config": {"configurable": {"api_key": SECRET, "model": "m"}},
        "items": [{"token": {"nested": [1, 2]}}, "token"],
        "empty": None,
    }
    sealed = keys.seal(plain)
    assert sealed["team"] == "blue" and sealed["config"]["configurable"]["model"] == "m"
    assert sealed["items"][1] == "token"  # a value equal to a key's name is just a value
    for value in (sealed["api_key"], sealed["config"]["configurable"]["api_key"], sealed["items"][0]["token"]):
        assert value.startswith(f"{PREFIX}aes.{key_id(KEY_A)}:")
    assert SECRET not in json.dumps(sealed)
    assert keys.seal(sealed) == sealed  # sealing twice does not wrap a seal
    assert keys.open(sealed) == plain
    assert not keys.stale(sealed) and keys.stale(plain)
    # Another key seals from now on; the old one still opens what it sealed, which is now stale.
    rotated = AesJsonKeys(keys.keys, KeyringCipher(Keyring(KEY_B, (KEY_A,))))
    assert rotated.open(sealed) == plain and rotated.stale(sealed)
    with pytest.raises(ValueError, match="neither LANGGRAPH_AES_KEY nor one of"):
        AesJsonKeys(keys.keys, KeyringCipher(Keyring(KEY_B))).open(sealed)
    with pytest.raises(SealedKeyFilter, match="api_key is sealed at rest"):
        keys.refuse_filter({"$or": [{"team": "blue"}, {"profile.api_key": {"$eq": "x"}}]})
    keys.refuse_filter({"team": "blue", "model": {"$ne": "api_key"}})  # values are not keys


# -- the app ------------------------------------------------------------------------------------


@pytest.fixture
def listed(settings):
    """LANGGRAPH_AES_KEY is KEY_A and api_key is listed; ``listed(keyring)`` changes the keys (a rotation)."""
    empty_checkpoint_tables()
    empty_store()

    def configure(keyring: Keyring) -> None:
        custom = json_keys_from({"LANGGRAPH_AES_JSON_KEYS": "api_key"}, keyring, handlers=None, index_fields=None)
        settings.DEERFLOW = {**settings.DEERFLOW, "CHECKPOINT_KEYRING": keyring, "ENCRYPTION": custom}
        close_sync_resources()

    configure(Keyring(KEY_A))
    yield configure
    close_sync_resources()
    empty_checkpoint_tables()  # sealed with a test key: would not open for the next test
    empty_store()


@pytest.fixture
async def api(owner, listed):
    async with in_process_api(owner.key) as client:
        yield client


def columns_holding(needle: str) -> list[str]:
    """Every ``table.column`` of the database with a value containing ``needle`` (bytes columns too)."""
    found = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            for column in connection.introspection.get_table_description(cursor, table):
                name = connection.ops.quote_name(column.name)
                if connection.vendor == "postgresql":
                    cursor.execute(
                        "SELECT data_type FROM information_schema.columns WHERE table_name = %s AND column_name = %s",
                        [table, column.name],
                    )
                    bytea = cursor.fetchone()[0] == "bytea"
                    match = f"position(%s in {name}) > 0" if bytea else f"{name}::text LIKE %s"
                    param: object = needle.encode() if bytea else f"%{needle}%"
                else:
                    match, param = f"instr(CAST({name} AS BLOB), %s) > 0", needle.encode()
                cursor.execute(f"SELECT COUNT(*) FROM {connection.ops.quote_name(table)} WHERE {match}", [param])
                if cursor.fetchone()[0]:
                    found.append(f"{table}.{column.name}")
    return found


def store_in_the_clear(thread_id: str, metadata: dict) -> None:
    """Thread metadata as a server without the list stored it (the ORM would seal it)."""
    cast = "::jsonb" if connection.vendor == "postgresql" else ""
    with connection.cursor() as cursor:
        sql = f"UPDATE threads_threadmeta SET metadata = %s{cast} WHERE thread_id = %s"
        cursor.execute(sql, [json.dumps(metadata), thread_id])


@pytest.mark.django_db(transaction=True)
async def test_listed_keys_are_served_in_the_clear_and_stored_sealed(api):
    thread = (await api.post("/threads", json={"metadata": {"api_key": SECRET, "team": "blue"}})).json()
    thread_id = thread["thread_id"]
    assert thread["metadata"]["api_key"] == SECRET
    assistant = await api.post(
        "/assistants", json={"graph_id": "lead_agent", "metadata": {"api_key": SECRET, "team": "blue"}}
    )
    assert assistant.status_code == 200, assistant.text
    run_body = {
        "assistant_id": "lead_agent",
        "input": human("plan the launch"),
        "config": {"configurable": {"api_key": SECRET}},
        "metadata": {"api_key": SECRET},
    }
    answer = await api.post(f"/threads/{thread_id}/runs/wait", json=run_body)
    assert answer.status_code == 200, answer.text
    [run] = (await api.get(f"/threads/{thread_id}/runs")).json()
    assert run["metadata"]["api_key"] == SECRET and run["kwargs"]["config"]["configurable"]["api_key"] == SECRET
    cron = await api.post(
        f"/threads/{thread_id}/runs/crons",
        json={
            "assistant_id": "lead_agent",
            "schedule": "0 0 1 1 *",
            "input": human("yearly"),
            "metadata": run_body["metadata"],
        },
    )
    assert cron.status_code == 200, cron.text
    item = {"namespace": ["prefs"], "key": "k1", "value": {"api_key": SECRET, "color": "red"}}
    assert (await api.put("/store/items", json=item)).status_code == 204
    stored = (await api.get("/store/items", params={"namespace": "prefs", "key": "k1"})).json()
    assert stored["value"] == item["value"]

    # Searches on the other keys work and show the listed key in the clear.
    found = (await api.post("/threads/search", json={"metadata": {"team": "blue"}})).json()
    assert [t["thread_id"] for t in found] == [thread_id] and found[0]["metadata"]["api_key"] == SECRET
    items = (
        await api.post("/store/items/search", json={"namespace_prefix": ["prefs"], "filter": {"color": "red"}})
    ).json()
    assert [i["value"]["api_key"] for i in items["items"]] == [SECRET]
    history = (await api.post(f"/threads/{thread_id}/history", json={"limit": 10})).json()
    assert history and all("api_key" not in state["metadata"] for state in history)  # kept out of checkpoint metadata

    # A filter on the listed key is refused, naming it, on every kind of search.
    refusals = [
        ("/threads/search", {"metadata": {"api_key": SECRET}}),
        ("/assistants/search", {"metadata": {"api_key": SECRET}}),
        ("/store/items/search", {"namespace_prefix": ["prefs"], "filter": {"api_key": SECRET}}),
    ]
    for path, body in refusals:
        refused = await api.post(path, json=body)
        assert refused.status_code == 422, (path, refused.text)
        assert "api_key is sealed at rest (LANGGRAPH_AES_JSON_KEYS)" in refused.json()["detail"], refused.text

    # At rest: sealed in every column that holds it, in the clear nowhere.
    assert await db(columns_holding)(SECRET) == []
    sealed = await db(columns_holding)(f"{PREFIX}aes.{key_id(KEY_A)}:")
    for column in ("threads_threadmeta.metadata", "runs_run.metadata", "runs_run.kwargs", "runs_assistant.metadata"):
        assert column in sealed, sealed
    assert "runs_cron.metadata" in sealed and "store.value" in sealed, sealed


@pytest.mark.django_db(transaction=True)
async def test_rotation_reseals_the_json_columns_and_the_old_key_can_go(api, listed, owner, capsys):
    thread_id = (await api.post("/threads", json={"metadata": {"api_key": SECRET}})).json()["thread_id"]
    # Written before the key was listed: stored in the clear, read as it is, sealed by reencrypt.
    legacy = await db(ThreadMeta.objects.create)(thread_id=f"legacy-{uuid.uuid4().hex}", owner=owner.user)
    await db(store_in_the_clear)(legacy.pk, {"api_key": "sk-legacy"})
    assert "threads_threadmeta.metadata" in await db(columns_holding)("sk-legacy")

    await db(listed)(Keyring(KEY_B, (KEY_A,)))
    assert (await api.get(f"/threads/{thread_id}")).json()["metadata"]["api_key"] == SECRET  # the fallback opens
    await db(call_command)("reencrypt")
    said = capsys.readouterr().out
    assert "threads_threadmeta.metadata: sealed 2 rows again" in said, said
    await db(call_command)("reencrypt")
    assert "threads_threadmeta" not in capsys.readouterr().out  # nothing stale is left

    await db(listed)(Keyring(KEY_B))  # the old key is gone
    assert (await api.get(f"/threads/{thread_id}")).json()["metadata"]["api_key"] == SECRET
    assert (await api.get(f"/threads/{legacy.pk}")).json()["metadata"]["api_key"] == "sk-legacy"
    assert await db(columns_holding)(SECRET) == [] and await db(columns_holding)("sk-legacy") == []
    assert await db(columns_holding)(f"{PREFIX}aes.{key_id(KEY_A)}:") == []


@pytest.mark.django_db(transaction=True)
async def test_a_value_no_configured_key_opens_is_a_503_not_a_leak(api, listed):
    thread_id = (await api.post("/threads", json={"metadata": {"api_key": SECRET}})).json()["thread_id"]
    await db(listed)(Keyring(KEY_B))  # KEY_A, which sealed it, is not configured
    refused = await api.get(f"/threads/{thread_id}")
    assert refused.status_code == 503, refused.text
    assert "neither LANGGRAPH_AES_KEY nor one of LANGGRAPH_AES_FALLBACK_KEYS" in refused.json()["detail"]
