"""Custom encryption at rest: langgraph.json's ``encryption.path`` (a ``langgraph_sdk.Encryption``).

The Platform's contract, on every backend this server stores to:

- **JSON fields** go through the project's ``@encryption.encrypt.json`` /
  ``decrypt.json`` handlers: thread ``metadata`` and ``values`` (the search
  mirror of its state), run ``metadata`` and ``kwargs``, assistant
  ``metadata`` and ``context``, cron ``metadata`` and ``payload``. The
  handler sees ``ctx.model`` and ``ctx.field``; it must keep every key (only
  values change: a handler that adds or drops a key is refused, as the
  Platform refuses it), so metadata filters keep working on the keys it
  leaves plaintext. Encryption happens where Django saves the row and
  decryption where it loads it (``core.encrypted_fields``): every reader —
  API, console, export — sees plaintext, and nothing is stored unencrypted
  on the way.
- **Checkpoint blobs** go through ``@encryption.encrypt.blob`` /
  ``decrypt.blob`` (``checkpoints.encryption.SealingCipher``).
- **The context** (``ctx.metadata``) is the ``X-Encryption-Context`` header
  (base64 of a JSON object) passed through the ``@encryption.context``
  handler with the caller, once per request. It is stored in plaintext with
  what it sealed (under ``CONTEXT_KEY`` in a JSON field, in the blob's
  envelope), so reads need no header. A run keeps the context of the request
  that started it (``Run.encryption_context``), a cron the context it was
  created with: what they write later, in any process, is sealed with it.

``LANGGRAPH_AES_JSON_KEYS`` (``core.aes_json``) takes the same place without
handlers or a context: only the listed keys' values are sealed, in the
calling thread, with ``LANGGRAPH_AES_KEY``.

The handlers are async (they may call a KMS); the savers and Django's field
hooks are not. Every handler call runs on one event loop of its own thread
(``_HandlerLoop``), so a handler's clients stay on the loop they were made on;
a synchronous caller waits for it. On the server's event loop that wait is
the handler's own time: a handler that calls a remote KMS should cache its
data keys, as LangChain's guide advises.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import contextvars
import json
import threading
from collections.abc import Coroutine, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from core.aes_json import ENV as AES_JSON_ENV
from core.aes_json import PREFIX as AES_PREFIX
from core.aes_json import AesJsonKeys, SealedKeyFilter
from core.auth_user import AuthUser
from core.errors import Invalid, Unavailable
from core.module_files import module_of_spec, project_setup

HEADER = "X-Encryption-Context"
# Where a JSON field keeps the context its values were sealed with (stripped on read).
CONTEXT_KEY = "__encryption_context__"
# Where a JSON field keeps a value that is not an object (sealed as {"value": ...}).
SEALED_VALUE = "__sealed_value__"
# The prefix of a text column's sealed value (JSON: the sealed value and its context).
SEALED_TEXT = "sealed:v1:"
MAX_HEADER_BYTES = 8192

T = TypeVar("T")


class EncryptionError(Unavailable):
    """A handler failed (it raised: no key for the context, its key service away) or broke the contract
    (a JSON handler changed the keys or returned no dict): a 503 naming the handler, nothing written."""


@dataclass(frozen=True)
class CustomEncryption:
    """How JSON fields (and maybe blobs) are sealed: langgraph.json's ``Encryption`` and where it came
    from, or ``LANGGRAPH_AES_JSON_KEYS`` (``json_keys``: chosen keys sealed with the AES key, no handlers)."""

    encryption: Any  # langgraph_sdk.Encryption; None with json_keys
    path: str
    json_keys: AesJsonKeys | None = None

    @property
    def handlers(self) -> bool:
        """Whether the project's handlers seal (they may seal any value, and take a context)."""
        return self.encryption is not None

    @property
    def seals_json(self) -> bool:
        return self.json_keys is not None or self.encryption.get_json_encryptor() is not None

    @property
    def seals_blobs(self) -> bool:
        return self.encryption is not None and self.encryption._blob_encryptor is not None

    @property
    def keeps_plain_copies(self) -> bool:
        """Whether a thread's title and its message search index may be kept: not when the handlers seal
        JSON (they may seal any value) nor when a listed key is ``content``, which messages keep their text
        under."""
        if self.json_keys is not None:
            return "content" not in self.json_keys.keys
        return not self.seals_json


def aes_json_keys(keys: frozenset[str], cipher: Any) -> CustomEncryption:
    """``LANGGRAPH_AES_JSON_KEYS``'s sealing (``core.aes_json``), in the place custom handlers take."""
    return CustomEncryption(encryption=None, path=AES_JSON_ENV, json_keys=AesJsonKeys(keys, cipher))


def active() -> CustomEncryption | None:
    """The configured custom encryption, or None."""
    return settings.DEERFLOW.get("ENCRYPTION")


# -- loading (start-up) ------------------------------------------------------------


def load(spec: str, *, folders: list[str] | tuple[str, ...] = (), env: Mapping[str, str] | None = None):
    """Import the ``Encryption`` at ``spec`` and check its handlers come in pairs; one line on any problem."""
    from langgraph_sdk import Encryption  # the project's handlers are registered on the SDK's class

    project_setup(folders, env)
    try:
        module, attr = module_of_spec(spec, prefix="deerflow_encryption")
    except Exception as exc:
        raise ImproperlyConfigured(f"encryption.path: {spec}: cannot import it: {type(exc).__name__}: {exc}") from None
    encryption = getattr(module, attr, None)
    if not isinstance(encryption, Encryption):
        raise ImproperlyConfigured(
            f"encryption.path: {spec}: {attr!r} is {type(encryption).__name__}, not a langgraph_sdk.Encryption"
        )
    for kind in ("blob", "json"):
        sealing = getattr(encryption, f"_{kind}_encryptor") is not None
        opening = getattr(encryption, f"_{kind}_decryptor") is not None
        if sealing != opening:
            missing = "decrypt" if sealing else "encrypt"
            raise ImproperlyConfigured(
                f"encryption.path: {spec}: @encryption.{'decrypt' if sealing else 'encrypt'}.{kind} is missing: "
                f"without the {missing} handler what is {'sealed' if sealing else 'stored'} could not be "
                f"{'read' if sealing else 'sealed'}"
            )
    if encryption._blob_encryptor is None and encryption._json_encryptor is None:
        raise ImproperlyConfigured(f"encryption.path: {spec}: the Encryption registers no handler")
    return CustomEncryption(encryption=encryption, path=spec)


# -- the handlers' loop ------------------------------------------------------------------


class _HandlerLoop:
    """One event loop, on a daemon thread, that every handler call runs on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def _running(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="encryption-handlers", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def call(self, what: str, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` (the handler ``what``) on the handlers' loop and wait for it, from any other thread."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise EncryptionError("an encryption handler may not read or write what is encrypted")
        try:
            return asyncio.run_coroutine_threadsafe(coro, self._running()).result()
        except EncryptionError:
            raise
        except Exception as exc:
            raise EncryptionError(f"{what} failed: {type(exc).__name__}: {exc}") from exc


_handlers = _HandlerLoop()


# -- the context ---------------------------------------------------------------------------

# A context fixed by a run or cron, or None: the request's (resolved once, on first use).
_fixed: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("encryption_context", default=None)
_request: contextvars.ContextVar[Any] = contextvars.ContextVar("encryption_request", default=None)
# The metadata keys custom auth's filters read in this request: a JSON handler must leave them plaintext.
_filter_keys: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "encryption_filter_keys", default=frozenset()
)


def header_context(value: str | None) -> dict[str, Any]:
    """The ``X-Encryption-Context`` header's object ({} without one); ValueError saying what is wrong."""
    if not value:
        return {}
    if len(value) > MAX_HEADER_BYTES:
        raise ValueError(f"{HEADER} is longer than {MAX_HEADER_BYTES} characters")
    try:
        data = json.loads(base64.b64decode(value, validate=True))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise ValueError(f"{HEADER} must be base64 of a JSON object") from None
    if not isinstance(data, dict):
        raise ValueError(f"{HEADER} must be base64 of a JSON object, not of a {type(data).__name__}")
    return data


def context_argument(text: str) -> dict[str, Any]:
    """A command's ``--context`` (a JSON object); ValueError saying what it must be."""
    try:
        context = json.loads(text)
    except ValueError:
        context = None
    if not isinstance(context, dict):
        raise ValueError('--context must be a JSON object, e.g. \'{"tenant_id": "acme"}\'')
    return context


@contextlib.contextmanager
def request_scope(request: Any) -> Iterator[None]:
    """Within a request: what is sealed uses its context (header and ``@encryption.context``), resolved on use."""
    token = _request.set(request)
    try:
        yield
    finally:
        _request.reset(token)


@contextlib.contextmanager
def fixed_scope(context: Mapping[str, Any] | None) -> Iterator[None]:
    """Within a run or cron firing: seal with the context it was started with."""
    token = _fixed.set(dict(context or {}))
    try:
        yield
    finally:
        _fixed.reset(token)


def current_context() -> dict[str, Any]:
    """The context what is sealed now is sealed with ({} outside a request, run or cron)."""
    fixed = _fixed.get()
    if fixed is not None:
        return dict(fixed)
    request = _request.get()
    if request is None or (custom := active()) is None or not custom.handlers:
        return {}
    resolved = getattr(request, "_encryption_context", None)
    if resolved is None:
        resolved = _resolve(request)
        request._encryption_context = resolved
    return dict(resolved)


def context_to_store() -> dict[str, Any] | None:
    """What a run or cron keeps to seal its later writes with: the current context (None: no handlers)."""
    custom = active()
    return current_context() if custom is not None and custom.handlers else None


def note_filter_keys(filters: Mapping[str, Any]) -> None:
    """Remember the metadata keys an auth filter reads (``$and``/``$or`` walked): sealing one is refused."""
    if active() is not None:
        refuse_sealed_filter("metadata", filters)
        _filter_keys.set(_filter_keys.get() | _keys_of(filters))


def _keys_of(filters: Mapping[str, Any]) -> frozenset[str]:
    keys: set[str] = set()
    for key, value in filters.items():
        if key in ("$and", "$or") and isinstance(value, list):
            for clause in value:
                if isinstance(clause, Mapping):
                    keys |= _keys_of(clause)
        elif not key.startswith("$"):
            keys.add(key)
    return frozenset(keys)


def _resolve(request: Any) -> dict[str, Any]:
    from langgraph_sdk.encryption.types import EncryptionContext

    context = getattr(request, "_encryption_header", None)
    if context is None:
        context = header_context(request.headers.get(HEADER))
    custom = active()
    handler = custom.encryption._context_handler if custom else None
    if handler is None:
        return context
    user = _handler_user(getattr(request, "user", None))
    result = _handlers.call("@encryption.context", handler(user, EncryptionContext(metadata=context)))
    if not isinstance(result, dict):
        raise EncryptionError(f"@encryption.context returned {type(result).__name__}, not a dict")
    return result


def _handler_user(user: Any) -> AuthUser:
    """The user ``@encryption.context`` gets: custom auth's (what authenticate returned), or ours by name."""
    data = getattr(user, "langgraph_auth_user", None)
    if data is None:
        name = getattr(user, "username", "") or ""
        data = {"identity": name, "display_name": name, "permissions": []}
    return AuthUser({"is_authenticated": bool(getattr(user, "is_authenticated", False)), **data})


# -- JSON ---------------------------------------------------------------------------------------


def _unwrap(result: Any) -> Any:
    """A decrypt handler's plaintext (a ``DecryptResult``'s replacement ciphertext is not written back)."""
    from langgraph_sdk.encryption.types import DecryptResult

    return result.plaintext if isinstance(result, DecryptResult) else result


async def _seal_json(custom: CustomEncryption, model: str, field: str, data: dict, context: dict) -> dict:
    from langgraph_sdk.encryption.types import EncryptionContext

    handler = custom.encryption.get_json_encryptor(model)
    sealed = await handler(EncryptionContext(model=model, field=field, metadata=context), data)
    if not isinstance(sealed, dict):
        raise EncryptionError(f"@encryption.encrypt.json returned {type(sealed).__name__} for {model}.{field}")
    if set(sealed) != set(data):
        changed = sorted(set(sealed) ^ set(data))
        raise EncryptionError(
            f"@encryption.encrypt.json changed the keys of {model}.{field} ({', '.join(map(str, changed))}): "
            "a JSON encryptor may change values only"
        )
    return sealed


async def _open_json(custom: CustomEncryption, model: str, field: str, data: dict, context: dict) -> dict:
    from langgraph_sdk.encryption.types import EncryptionContext

    handler = custom.encryption.get_json_decryptor(model)
    opened = _unwrap(await handler(EncryptionContext(model=model, field=field, metadata=context), data))
    if not isinstance(opened, dict):
        raise EncryptionError(f"@encryption.decrypt.json returned {type(opened).__name__} for {model}.{field}")
    return opened


def listed_json_keys() -> frozenset[str]:
    """The keys ``LANGGRAPH_AES_JSON_KEYS`` seals (empty without it)."""
    custom = active()
    return custom.json_keys.keys if custom is not None and custom.json_keys is not None else frozenset()


def keeps_plain_copies() -> bool:
    """Whether a thread's title and message search index may be kept (``CustomEncryption.keeps_plain_copies``)."""
    custom = active()
    return custom is None or custom.keeps_plain_copies


def nothing_sealed_in(stored: Any) -> bool:
    """Whether a JSON column's stored text certainly holds no ``LANGGRAPH_AES_JSON_KEYS`` seal (skip opening)."""
    custom = active()
    return custom is not None and custom.json_keys is not None and isinstance(stored, str) and AES_PREFIX not in stored


def seals_json() -> bool:
    """Whether JSON is sealed (handlers, or ``LANGGRAPH_AES_JSON_KEYS``): our own copies of it (run events,
    the protocol-v2 log) are sealed the same way."""
    custom = active()
    return custom is not None and custom.seals_json


def seal_json(model: str, field: str, value: Any) -> Any:
    """``value`` as stored: sealed by the handler, with the context under CONTEXT_KEY (unchanged: no handler).

    An object is sealed key by key (the handler sees it); any other JSON
    value (text, a list, a number) is sealed as ``{"value": value}`` and
    kept under SEALED_VALUE.
    """
    custom = active()
    if custom is None or not custom.seals_json or value is None or value == {}:
        return value
    if custom.json_keys is not None:
        if field == "metadata" and isinstance(value, dict):
            _refuse_sealing_filter_keys(custom.json_keys.filtered_keys({k: None for k in value}))
        return custom.json_keys.seal(value)
    context = current_context()
    if isinstance(value, dict):
        data = {k: v for k, v in value.items() if k != CONTEXT_KEY}
        stored = _handlers.call(
            f"@encryption.encrypt.json on {model}.{field}", _seal_json(custom, model, field, data, context)
        )
        if field == "metadata":
            _refuse_sealing_filter_keys([k for k in data if stored[k] != data[k]])
    else:
        sealed = _seal_json(custom, model, field, {"value": value}, context)
        stored = {SEALED_VALUE: _handlers.call(f"@encryption.encrypt.json on {model}.{field}", sealed)["value"]}
    return {**stored, CONTEXT_KEY: context} if context else stored


def _refuse_sealing_filter_keys(sealed: list[str]) -> None:
    """Invalid when a metadata key custom auth filters on in this request would be sealed."""
    if hidden := sorted(set(sealed) & _filter_keys.get()):
        raise Invalid(
            "metadata",
            f"encryption seals {', '.join(hidden)}, which custom auth filters on: a sealed value never matches "
            "its filter, so isolation would silently break; leave it plaintext",
        )


def refuse_sealed_filter(field: str, filters: Any) -> None:
    """Invalid when a client's filter on ``field`` reads a key ``LANGGRAPH_AES_JSON_KEYS`` seals."""
    custom = active()
    if custom is not None and custom.json_keys is not None:
        try:
            custom.json_keys.refuse_filter(filters)
        except SealedKeyFilter as exc:
            raise Invalid(field, str(exc)) from None


def open_json(model: str, field: str, value: Any) -> Any:
    """A stored value opened: the handler sees it with the context it was sealed with (unchanged: no handler)."""
    custom = active()
    if custom is None or not custom.seals_json or not value:
        return value
    if custom.json_keys is not None:
        try:
            return custom.json_keys.open(value)
        except ValueError as exc:  # no configured key opens it, or it is damaged
            raise EncryptionError(f"{model}.{field}: {exc}") from exc
    if not isinstance(value, dict):
        return value
    context = value.get(CONTEXT_KEY)
    context = context if isinstance(context, dict) else {}
    if SEALED_VALUE in value:
        sealed = {"value": value[SEALED_VALUE]}
        opened = _handlers.call(
            f"@encryption.decrypt.json on {model}.{field}", _open_json(custom, model, field, sealed, context)
        )
        return opened.get("value")
    data = {k: v for k, v in value.items() if k != CONTEXT_KEY}
    return _handlers.call(
        f"@encryption.decrypt.json on {model}.{field}", _open_json(custom, model, field, data, context)
    )


# -- blobs -----------------------------------------------------------------------------------------


def seal_blob(custom: CustomEncryption, plaintext: bytes, context: dict) -> bytes:
    from langgraph_sdk.encryption.types import EncryptionContext

    handler = custom.encryption._blob_encryptor
    sealed = _handlers.call(
        "@encryption.encrypt.blob", handler(EncryptionContext(model="checkpoint", metadata=context), plaintext)
    )
    if not isinstance(sealed, bytes | bytearray):
        raise EncryptionError(f"@encryption.encrypt.blob returned {type(sealed).__name__}, not bytes")
    return bytes(sealed)


def open_blob(custom: CustomEncryption, sealed: bytes, context: dict) -> bytes:
    from langgraph_sdk.encryption.types import EncryptionContext

    handler = custom.encryption._blob_decryptor
    opened = _unwrap(
        _handlers.call(
            "@encryption.decrypt.blob", handler(EncryptionContext(model="checkpoint", metadata=context), sealed)
        )
    )
    if not isinstance(opened, bytes | bytearray):
        raise EncryptionError(f"@encryption.decrypt.blob returned {type(opened).__name__}, not bytes")
    return bytes(opened)


def seal_text(model: str, field: str, text: str) -> str:
    """A text column's value as stored: sealed as ``{field: text}``, prefixed SEALED_TEXT (unchanged: no handler)."""
    if not text or (custom := active()) is None or not custom.handlers or not custom.seals_json:
        return text  # LANGGRAPH_AES_JSON_KEYS seal keys; a text has none
    return SEALED_TEXT + json.dumps(seal_json(model, field, {field: text}), ensure_ascii=False)


def open_text(model: str, field: str, stored: str) -> str:
    """A text column's stored value opened (text not sealed is returned as it is)."""
    if not stored or not stored.startswith(SEALED_TEXT) or not seals_json():
        return stored
    opened = open_json(model, field, json.loads(stored[len(SEALED_TEXT) :]))
    return str(opened.get(field, "")) if isinstance(opened, dict) else ""
