"""Decode each stored message once per read, however many checkpoints hold it.

A full-mode checkpoint stores the whole message list, so a history page of
100 checkpoints on a 200-turn thread decodes ~37,000 messages (msgpack plus a
pydantic constructor each) for ~400 distinct ones: 2.2 s of a 7.4 s request
on SQLite. Within ``shared_decodes()``, the saver's msgpack extension hook
returns the object it already built for identical bytes, so each distinct
stored message is built once and the snapshots of that read share it.

The memo lives in a context variable for one read only: nothing decoded
outlives the request, and a run's own reads never see shared objects. The
hook is LangGraph's own (``JsonPlusSerializer._unpack_ext_hook``, pinned in
pyproject.toml; a test asserts it is wrapped), so an upgrade that renames it
fails loudly, not silently slower.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import ormsgpack
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.jsonplus import EXT_DELTA_SNAPSHOT
from langgraph.checkpoint.serde.types import _DeltaSnapshot

_memo: ContextVar[dict[tuple[int, int, bytes], Any] | None] = ContextVar("deerflow_decode_memo", default=None)


@contextmanager
def shared_decodes() -> Iterator[None]:
    """Share decoded objects between identical stored bytes for the duration of one read."""
    token = _memo.set({})
    try:
        yield
    finally:
        _memo.reset(token)


def _memoizing(original: Callable[[int, bytes], Any]) -> Callable[[int, bytes], Any]:
    def ext_hook(code: int, data: bytes) -> Any:
        memo = _memo.get()
        if memo is None:
            return original(code, data)
        key = (id(original), code, data)
        try:
            return memo[key]
        except KeyError:
            pass
        if code == EXT_DELTA_SNAPSHOT:
            # A delta snapshot holds the message list; LangGraph's hook would decode
            # its messages with itself, past the memo (9,160 builds for ~400 messages
            # in a delta history of 1,000). The same three steps, through this hook.
            value = _DeltaSnapshot(ormsgpack.unpackb(data, ext_hook=ext_hook, option=ormsgpack.OPT_NON_STR_KEYS))
        else:
            value = original(code, data)
        memo[key] = value
        return value

    functools.update_wrapper(ext_hook, original, assigned=(), updated=())  # sets __wrapped__ only
    return ext_hook


def install_decode_memo(saver: BaseCheckpointSaver) -> BaseCheckpointSaver:
    """Wrap ``saver``'s msgpack extension hook (idempotent); return the saver.

    A sealing serializer (``checkpoints.encryption``) opens a value and hands
    it to its inner one, whose hook is wrapped.
    """
    serde = getattr(saver, "serde", None)
    serde = getattr(serde, "serde", serde)  # EncryptedSerializer keeps LangGraph's serializer as .serde
    hook = getattr(serde, "_unpack_ext_hook", None)
    if serde is not None and hook is not None and getattr(hook, "__wrapped__", None) is None:
        serde._unpack_ext_hook = _memoizing(hook)
    return saver
