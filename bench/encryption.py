"""What encryption at rest costs: none, ``LANGGRAPH_AES_KEY`` (alone and with ``LANGGRAPH_AES_JSON_KEYS``), handlers.

    .venv/bin/python -m bench.encryption [--requests 200] [--turns 30] [--messages 2000]

One process, SQLite in a temporary folder. The JSON-keys side lists one of
the five metadata keys (``note``): sealed on write, opened on read. The
custom side is the handlers
of ``tests/fixtures/encrypted_project`` (AES-EAX with a key per tenant,
JSON values sealed one by one), the tenant sent as ``X-Encryption-Context``.
Measured, each side alternating with the others in rounds:

- ``POST /threads`` with five metadata keys and ``GET /threads/{id}``
  through Django's whole request stack (the test client, an API key): the
  JSON handlers on write and on read;
- a turn of the demo agent through the process's saver (the graph's own
  checkpoint writes and reads: the blob handlers);
- serializing and reading back a checkpoint of ``--messages`` messages.

Reported: median per operation and the ratio to no encryption.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from bench.in_process import setup_sqlite_django

ROOT = Path(__file__).resolve().parents[1]
HANDLERS = ROOT / "tests" / "fixtures" / "encrypted_project" / "encryption.py"
ROUND = 20
CONTEXT = {"tenant_id": "acme"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.encryption", description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="requests per route and side")
    parser.add_argument("--turns", type=int, default=30, help="demo-agent turns per side")
    parser.add_argument("--messages", type=int, default=2000, help="messages in the serialized checkpoint")
    parser.add_argument("--quick", action="store_true", help="a sanity run: 40 requests, 6 turns, 200 messages")
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.turns, args.messages = 40, 6, 200
    return args


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def _timed(call: Callable[[], object], count: int) -> list[float]:
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return samples


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    os.environ["ENCRYPTION_MASTER_SECRET"] = "bench-secret"
    setup_sqlite_django("bench-encryption-")
    from django.conf import settings
    from langchain_core.messages import AIMessage, HumanMessage
    from rest_framework.test import APIClient

    from checkpoints.encryption import Keyring, checkpoint_serde, json_keys_from
    from checkpoints.runtime import close_sync_resources
    from core.custom_encryption import fixed_scope, load
    from deerflow_site.services import api_key_create
    from tests.helpers import run_turns
    from threads.models import ThreadMeta

    _, key = api_key_create(username="bench")
    owner = ThreadMeta._meta.get_field("owner").related_model.objects.get(username="bench")
    header = base64.b64encode(json.dumps(CONTEXT).encode()).decode()
    custom = load(f"{HANDLERS}:encryption")
    keyring = Keyring(b"bench-key-of-32-bytes-exactly!!!")
    json_keys = json_keys_from({"LANGGRAPH_AES_JSON_KEYS": "note"}, keyring, handlers=None, index_fields=None)
    sides = {
        "none": (None, None),
        "LANGGRAPH_AES_KEY": (keyring, None),
        "+ AES_JSON_KEYS": (keyring, json_keys),
        "encryption.path": (None, custom),
    }

    def use(side: str) -> None:
        ring, handlers = sides[side]
        settings.DEERFLOW = {**settings.DEERFLOW, "CHECKPOINT_KEYRING": ring, "ENCRYPTION": handlers}
        close_sync_resources()

    metadata = {"org_id": "acme", "project": "launch", "note": "the zebra plan", "priority": 3, "tags": ["a", "b"]}
    clients = {}
    for side in sides:  # each client's middleware is built on its first request, with its side's settings
        use(side)
        clients[side] = APIClient(HTTP_X_API_KEY=key, HTTP_X_ENCRYPTION_CONTEXT=header)
        created = clients[side].post("/api/threads", {"metadata": metadata}, format="json")
        clients[side].thread_id = created.json()["thread_id"]
    operations: dict[str, Callable[[str], Callable[[], object]]] = {
        "POST /threads (5 metadata keys)": lambda side: lambda: _ok(
            clients[side].post("/api/threads", {"metadata": metadata}, format="json")
        ),
        "GET /threads/{id} (5 metadata keys)": lambda side: lambda: _ok(
            clients[side].get(f"/api/threads/{clients[side].thread_id}")
        ),
    }
    samples: dict[tuple[str, str], list[float]] = {}
    for operation, make in operations.items():
        for side in sides:  # warm-up
            use(side)
            _timed(make(side), 5)
        for _ in range(max(1, args.requests // ROUND)):
            for side in sides:
                use(side)
                samples.setdefault((operation, side), []).extend(_timed(make(side), ROUND))

    turn = "a demo-agent turn (saver writes and reads)"
    threads = {}
    for side in sides:
        use(side)
        threads[side] = ThreadMeta.objects.create(thread_id=str(uuid.uuid4()), owner=owner).thread_id
    for index in range(args.turns):
        for side in sides:
            use(side)
            with fixed_scope(CONTEXT):
                samples.setdefault((turn, side), []).extend(
                    _timed(lambda side=side, index=index: run_turns(threads[side], [f"turn {index}"]), 1)
                )

    values = {
        "messages": [
            (HumanMessage if i % 2 == 0 else AIMessage)(content=f"message {i} " + "lorem ipsum " * 40, id=str(i))
            for i in range(args.messages)
        ]
    }
    serdes = {"none": checkpoint_serde(None) or _plain(), "LANGGRAPH_AES_KEY": checkpoint_serde(keyring)}
    serdes["encryption.path"] = checkpoint_serde(None, custom)
    dumped = {}
    with fixed_scope(CONTEXT):
        size = len(serdes["none"].dumps_typed(values)[1])
        dump, load_ = f"serialize a {size / 1e6:.2f} MB checkpoint", f"read a {size / 1e6:.2f} MB checkpoint back"
        for _ in range(5):
            for side, serde in serdes.items():
                samples.setdefault((dump, side), []).extend(_timed(lambda serde=serde: serde.dumps_typed(values), 1))
                dumped[side] = serde.dumps_typed(values)
                samples.setdefault((load_, side), []).extend(
                    _timed(lambda serde=serde, side=side: serde.loads_typed(dumped[side]), 1)
                )

    print(f"Encryption at rest, SQLite, one process ({args.requests} requests, {args.turns} turns a side)")
    print(f"{'operation':44} {'side':20} {'median ms':>10} {'÷ none':>8}")
    for operation in dict.fromkeys(op for op, _ in samples):
        base = _median_ms(samples[(operation, "none")])
        for side in sides:
            if (operation, side) in samples:  # the JSON keys seal no checkpoint: the serializer is the key's
                median = _median_ms(samples[(operation, side)])
                print(f"{operation:44} {side:20} {median:>10.2f} {median / base:>7.2f}x")


def _ok(response) -> object:
    assert response.status_code == 200, response.content[:300]
    return response


def _plain():
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    return JsonPlusSerializer()


if __name__ == "__main__":
    main()
