"""``core.custom_encryption``: loading langgraph.json's ``encryption.path``, sealed JSON columns, sealed blobs.

The handlers are the encrypted fixture project's (a key per tenant, values
sealed one by one); the end-to-end path through a server and the SDK is
tests/live/test_custom_encryption.py.
"""

from __future__ import annotations

import contextvars
import uuid
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.db.models import TextField
from django.db.models.functions import Cast

from checkpoints.encryption import Keyring, KeyringError, checkpoint_serde
from core import custom_encryption
from core.custom_encryption import CONTEXT_KEY, EncryptionError, fixed_scope, load
from core.errors import Invalid
from threads.models import ThreadMeta

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "encrypted_project" / "encryption.py"


@pytest.fixture
def handlers(settings, monkeypatch):
    """The fixture project's Encryption, configured for this process."""
    monkeypatch.setenv("ENCRYPTION_MASTER_SECRET", "unit-test-secret")
    custom = load(f"{FIXTURE}:encryption")
    settings.DEERFLOW = {**settings.DEERFLOW, "ENCRYPTION": custom}
    return custom


def write_module(tmp_path: Path, body: str) -> str:
    path = tmp_path / f"enc_{uuid.uuid4().hex[:8]}.py"
    path.write_text("from langgraph_sdk import Encryption\n\n" + body)
    return f"{path}:encryption"


@pytest.mark.backend_free
@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("encryption = object()\n", "'encryption' is object, not a langgraph_sdk.Encryption"),
        ("encryption = Encryption()\n", "the Encryption registers no handler"),
        (
            "encryption = Encryption()\n\n@encryption.encrypt.json\nasync def seal(ctx, data):\n    return data\n",
            "@encryption.decrypt.json is missing",
        ),
        (
            "encryption = Encryption()\n\n@encryption.decrypt.blob\nasync def open_(ctx, blob):\n    return blob\n",
            "@encryption.encrypt.blob is missing",
        ),
        ("raise RuntimeError('no KMS here')\n", "cannot import it: RuntimeError: no KMS here"),
    ],
)
def test_an_encryption_this_server_could_not_apply_stops_start_up_in_one_line(tmp_path, body, said):
    with pytest.raises(ImproperlyConfigured, match=said) as refused:
        load(write_module(tmp_path, body))
    assert "\n" not in str(refused.value)


@pytest.mark.backend_free
def test_a_json_encryptor_that_changes_the_keys_is_refused(tmp_path, settings):
    spec = write_module(
        tmp_path,
        "encryption = Encryption()\n\n"
        "@encryption.encrypt.json\nasync def seal(ctx, data):\n    return {'__encrypted__': str(data)}\n\n"
        "@encryption.decrypt.json\nasync def open_(ctx, data):\n    return data\n",
    )
    settings.DEERFLOW = {**settings.DEERFLOW, "ENCRYPTION": load(spec)}
    with pytest.raises(EncryptionError, match=r"changed the keys of thread.metadata \(__encrypted__, note\)"):
        custom_encryption.seal_json("thread", "metadata", {"note": "x"})


@pytest.mark.backend_free
def test_sealing_a_key_an_auth_filter_reads_is_a_422_naming_it(handlers):
    def within_one_request():
        with fixed_scope({"tenant_id": "acme"}):
            custom_encryption.note_filter_keys({"$or": [{"team": {"$eq": "a"}}, {"org_id": "acme"}]})
            # org_id is left plaintext by the handler: fine; team would be sealed: refused.
            sealed = custom_encryption.seal_json("thread", "metadata", {"org_id": "acme", "note": "x"})
            assert sealed["org_id"] == "acme"
            with pytest.raises(Invalid, match="seals team, which custom auth filters on") as refused:
                custom_encryption.seal_json("thread", "metadata", {"org_id": "acme", "team": "a"})
            assert refused.value.field == "metadata"
            # Other fields than metadata are not what filters read.
            custom_encryption.seal_json("run", "kwargs", {"team": "a"})

    contextvars.copy_context().run(within_one_request)  # the request's filter keys end with it


@pytest.mark.backend_free
@pytest.mark.parametrize(
    ("header", "said"),
    [("%%%", "base64 of a JSON object"), ("WzFd", "not of a list"), ("x" * 9000, "longer than 8192")],
)
def test_a_malformed_context_header_says_what_is_wrong(header, said):
    with pytest.raises(ValueError, match=said):
        custom_encryption.header_context(header)


@pytest.mark.django_db
def test_a_sealed_column_stores_ciphertext_with_its_context_and_filters_on_the_plaintext_keys(handlers, owner):
    with fixed_scope({"tenant_id": "acme"}):
        thread = ThreadMeta.objects.create(
            thread_id=str(uuid.uuid4()), owner=owner.user, metadata={"note": "zebra secret", "org_id": "acme"}
        )
    raw = ThreadMeta.objects.filter(pk=thread.pk).annotate(text=Cast("metadata", output_field=TextField())).get().text
    assert "zebra" not in raw and "enc:" in raw and CONTEXT_KEY in raw and "acme" in raw
    # Read outside any request or run: the stored context opens it.
    assert ThreadMeta.objects.get(pk=thread.pk).metadata == {"note": "zebra secret", "org_id": "acme"}
    assert ThreadMeta.objects.values_list("metadata", flat=True).get(pk=thread.pk)["note"] == "zebra secret"
    # Lookups compare with what is stored: the plaintext keys filter, a sealed value does not match its plaintext.
    assert ThreadMeta.objects.filter(pk=thread.pk, metadata__org_id="acme").exists()
    assert ThreadMeta.objects.filter(pk=thread.pk, metadata__jsoncontains={"org_id": "acme"}).exists()
    assert not ThreadMeta.objects.filter(pk=thread.pk, metadata__note="zebra secret").exists()
    # An update seals again (here with another tenant's key), and reads back.
    with fixed_scope({"tenant_id": "acme-eu"}):
        ThreadMeta.objects.filter(pk=thread.pk).update(metadata={"note": "moved", "org_id": "acme"})
    assert ThreadMeta.objects.get(pk=thread.pk).metadata == {"note": "moved", "org_id": "acme"}


@pytest.mark.django_db
def test_without_a_tenant_the_handler_refuses_a_503_naming_it_and_nothing_is_written(handlers, owner):
    thread_id = str(uuid.uuid4())
    with pytest.raises(
        EncryptionError, match=r"@encryption.encrypt.json on thread.metadata failed: ValueError: no tenant"
    ):
        with transaction.atomic():
            ThreadMeta.objects.create(thread_id=thread_id, owner=owner.user, metadata={"note": "zebra"})
    assert not ThreadMeta.objects.filter(pk=thread_id).exists()


@pytest.mark.backend_free
def test_checkpoint_blobs_seal_with_the_handlers_and_values_sealed_with_the_aes_key_stay_readable(handlers):
    keyring = Keyring(b"k" * 32)
    before = checkpoint_serde(keyring)
    after = checkpoint_serde(keyring, handlers)
    legacy = before.dumps_typed({"text": "zebra before"})
    with fixed_scope({"tenant_id": "acme"}):
        sealed = after.dumps_typed({"text": "zebra after"})
    assert sealed[0] == "msgpack+custom" and b"zebra" not in sealed[1] and b'"tenant_id":"acme"' in sealed[1]
    assert after.loads_typed(legacy) == {"text": "zebra before"}
    assert after.loads_typed(sealed) == {"text": "zebra after"}  # no context needed to read: the envelope has it
    assert checkpoint_serde(None, handlers).loads_typed(sealed) == {"text": "zebra after"}
    with pytest.raises(KeyringError, match="no LANGGRAPH_AES_KEY is configured"):
        checkpoint_serde(None, handlers).loads_typed(legacy)
    with pytest.raises(KeyringError, match="names no encryption.path"):
        before.loads_typed(sealed)
