"""Checkpoints sealed at rest (``LANGGRAPH_AES_KEY``), read with fallback keys, and rotated on the pass's backend."""

from __future__ import annotations

import threading
import uuid

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from checkpoints.accessor import state_accessor
from checkpoints.encryption import (
    Keyring,
    KeyringCipher,
    KeyringError,
    checkpoint_serde,
    key_id,
    keyring_from,
)
from checkpoints.runtime import close_sync_resources, sync_resources
from tests.checkpoints.support import empty_checkpoint_tables
from tests.helpers import run_turns
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)

KEY_A = b"a" * 32
KEY_B = b"b" * 16
SECRET = "zebra-7431 secret plan"


def use_keys(settings, keyring: Keyring | None) -> None:
    settings.DEERFLOW = {**settings.DEERFLOW, "CHECKPOINT_KEYRING": keyring}
    close_sync_resources()


@pytest.fixture
def keys(settings):
    """Set the process's keyring; the checkpoint tables start empty (the flush does not reach them)."""
    empty_checkpoint_tables()
    yield lambda keyring: use_keys(settings, keyring)
    close_sync_resources()
    empty_checkpoint_tables()  # rows sealed with a test key would not open for the next test


def stored_values() -> list[tuple[str, bytes]]:
    """Every (type, bytes) the savers stored, straight from their tables."""
    sql = {
        "sqlite": ["SELECT type, checkpoint FROM checkpoints", "SELECT type, value FROM writes"],
        "postgresql": ["SELECT type, blob FROM checkpoint_blobs", "SELECT type, blob FROM checkpoint_writes"],
    }[connection.vendor]
    found = []
    with connection.cursor() as cursor:
        for query in sql:
            cursor.execute(query)
            found += [(type_, bytes(value)) for type_, value in cursor.fetchall() if value is not None]
    return found


def messages(thread_id: str) -> list[str]:
    values = state_accessor("lead_agent").graph.get_state({"configurable": {"thread_id": thread_id}}).values
    return [m.content for m in values["messages"]]


def new_thread(owner) -> str:
    return ThreadMeta.objects.create(thread_id=f"enc-{uuid.uuid4().hex}", owner=owner.user).thread_id


def test_a_key_is_16_24_or_32_bytes_and_fallbacks_need_one():
    assert keyring_from({}) is None
    assert keyring_from({"LANGGRAPH_AES_KEY": "k" * 24, "LANGGRAPH_AES_FALLBACK_KEYS": "a" * 16 + ", " + "b" * 32}) == (
        Keyring(b"k" * 24, (b"a" * 16, b"b" * 32))
    )
    with pytest.raises(KeyringError, match="LANGGRAPH_AES_KEY must be 16, 24 or 32 bytes"):
        keyring_from({"LANGGRAPH_AES_KEY": "short"})
    with pytest.raises(KeyringError, match="each key of LANGGRAPH_AES_FALLBACK_KEYS"):
        keyring_from({"LANGGRAPH_AES_KEY": "k" * 16, "LANGGRAPH_AES_FALLBACK_KEYS": "x"})
    with pytest.raises(KeyringError, match="is set without LANGGRAPH_AES_KEY"):
        keyring_from({"LANGGRAPH_AES_FALLBACK_KEYS": "a" * 16})


def test_the_cipher_names_its_key_and_opens_langgraphs_own_envelope():
    cipher = KeyringCipher(Keyring(KEY_B, (KEY_A,)))
    name, sealed = cipher.encrypt(b"hello")
    assert name == f"aes.{key_id(KEY_B)}" and b"hello" not in sealed
    assert cipher.decrypt(name, sealed) == b"hello"
    # What LangGraph's EncryptedSerializer.from_pycryptodome_aes wrote with an older key.
    upstream = EncryptedSerializer.from_pycryptodome_aes(key=KEY_A)
    assert checkpoint_serde(Keyring(KEY_B, (KEY_A,))).loads_typed(upstream.dumps_typed({"x": 1})) == {"x": 1}
    with pytest.raises(KeyringError, match="neither LANGGRAPH_AES_KEY nor one of LANGGRAPH_AES_FALLBACK_KEYS"):
        KeyringCipher(Keyring(KEY_B)).decrypt(f"aes.{key_id(KEY_A)}", sealed)


def test_a_sealed_thread_has_nothing_readable_in_the_checkpoint_tables(owner, keys):
    keys(Keyring(KEY_A))
    thread_id = new_thread(owner)
    run_turns(thread_id, [SECRET, "and again"])
    assert messages(thread_id)[0] == SECRET
    stored = stored_values()
    assert stored and all(f"+aes.{key_id(KEY_A)}" in type_ for type_, _ in stored)
    assert not any(SECRET.encode() in value or b"zebra" in value for _, value in stored)
    state = state_accessor("lead_agent").graph.get_state({"configurable": {"thread_id": thread_id}})
    assert "zebra" in state.values["title"]  # a string channel: upstream's PostgreSQL saver keeps it inline
    if connection.vendor == "postgresql":  # here it is sealed in a blob, with everything else
        with connection.cursor() as cursor:
            cursor.execute("SELECT checkpoint::text FROM checkpoints WHERE thread_id = %s", [thread_id])
            rows = [text for (text,) in cursor.fetchall()]
        assert len(rows) >= 4 and not any("zebra" in text for text in rows), rows
    # The state, history and the console's raw readers open it (storage accounting, lineage previews).
    from checkpoints.storage import thread_storage_get

    summary = thread_storage_get(thread_id=thread_id)
    assert summary["checkpoint_count"] >= 4 and summary["channels"]
    history = list(state_accessor("lead_agent").graph.get_state_history({"configurable": {"thread_id": thread_id}}))
    assert len(history) >= 4
    # Without the key nothing opens it: LangGraph's serializer names the sealed type it cannot read.
    keys(None)
    with pytest.raises(NotImplementedError, match=rf"msgpack\+aes\.{key_id(KEY_A)}"):
        messages(thread_id)
    keys(Keyring(KEY_B))  # another key: the error names the key that would open it
    with pytest.raises(KeyringError, match=rf"sealed with 'aes\.{key_id(KEY_A)}', whose key is neither"):
        messages(thread_id)


def test_rotation_mid_traffic_loses_nothing(owner, keys):
    keys(Keyring(KEY_A))
    old = new_thread(owner)
    run_turns(old, [f"{SECRET} {i}" for i in range(3)])
    plain_before = messages(old)
    # The new key, the old one as a fallback: old values read, new ones sealed with the new key.
    keys(Keyring(KEY_B, (KEY_A,)))
    assert messages(old) == plain_before
    busy = new_thread(owner)
    errors: list[BaseException] = []

    def traffic() -> None:
        try:
            run_turns(busy, [f"turn {i}" for i in range(6)])
            run_turns(old, ["one more"])
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    writer = threading.Thread(target=traffic)
    writer.start()
    call_command("encrypt_checkpoints", "--batch-size", "3")
    writer.join()
    assert errors == []
    call_command("encrypt_checkpoints")  # whatever the traffic wrote is sealed with the new key already
    assert {type_.rsplit("+", 1)[1] for type_, _ in stored_values()} == {f"aes.{key_id(KEY_B)}"}
    # The old key can go: everything still reads, nothing was lost.
    keys(Keyring(KEY_B))
    assert messages(old)[: len(plain_before)] == plain_before and messages(old)[-2] == "one more"
    assert [m for m in messages(busy) if not m.startswith("echo")] == [f"turn {i}" for i in range(6)]


def test_encrypt_checkpoints_seals_what_was_stored_before_the_key(owner, keys, capsys):
    keys(None)
    thread_id = new_thread(owner)
    run_turns(thread_id, [SECRET])
    assert any(SECRET.encode() in value for _, value in stored_values())
    keys(Keyring(KEY_A))
    assert messages(thread_id)[0] == SECRET  # plaintext still reads under a key
    call_command("encrypt_checkpoints", "--dry-run")
    assert "would seal" in capsys.readouterr().out
    assert any(SECRET.encode() in value for _, value in stored_values())
    call_command("encrypt_checkpoints")
    assert not any(SECRET.encode() in value for _, value in stored_values())
    assert messages(thread_id)[0] == SECRET


@pytest.mark.postgres_only
def test_primitive_values_stored_inline_before_the_key_are_moved_into_sealed_blobs(owner, keys, capsys):
    keys(None)
    thread_id = new_thread(owner)
    run_turns(thread_id, [SECRET])  # upstream's saver keeps the title (a string) inline in each checkpoint row
    assert inline_holding("zebra") >= 1
    keys(Keyring(KEY_A))
    run_turns(thread_id, ["and again"])  # the title unchanged: the new rows keep it in a sealed blob
    accessor = state_accessor("lead_agent")
    config = {"configurable": {"thread_id": thread_id}}
    assert "zebra" in accessor.graph.get_state(config).values["title"]
    before = inline_holding("zebra")
    titles = [s.values.get("title") for s in accessor.graph.get_state_history(config)]
    assert before >= 1 and sum("zebra" in (t or "") for t in titles) > before, titles  # the new rows' in blobs
    call_command("encrypt_checkpoints", "--dry-run")
    assert f"checkpoints (inline values): would seal {before} rows" in capsys.readouterr().out
    call_command("encrypt_checkpoints")
    assert inline_holding("zebra") == 0
    assert [s.values.get("title") for s in accessor.graph.get_state_history(config)] == titles
    call_command("encrypt_checkpoints")
    assert "checkpoints (inline values): sealed 0 rows" in capsys.readouterr().out


def inline_holding(needle: str) -> int:
    """How many checkpoint rows hold ``needle`` in their JSON (PostgreSQL: the values upstream keeps inline)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM checkpoints WHERE checkpoint::text LIKE %s", [f"%{needle}%"])
        return cursor.fetchone()[0]


def test_encrypt_checkpoints_without_a_key_is_refused(keys):
    keys(None)
    with pytest.raises(CommandError, match="LANGGRAPH_AES_KEY is not set"):
        call_command("encrypt_checkpoints")


def test_the_savers_get_the_sealing_serializer_only_with_a_key(keys):
    keys(None)
    assert not isinstance(sync_resources().saver.serde, EncryptedSerializer)
    keys(Keyring(KEY_A))
    assert isinstance(sync_resources().saver.serde, EncryptedSerializer)
