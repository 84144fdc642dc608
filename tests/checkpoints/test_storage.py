"""Storage accounting of a thread: rows and bytes per table and channel, head mode, snapshots, orphans.

The oracle is the saver API (checkpoints, pending writes, materialized
snapshots), never the accounting's own SQL.
"""

from __future__ import annotations

from collections import Counter

import pytest
from django.db import connection
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from checkpoints.accessor import thread_config
from checkpoints.storage import thread_storage_get
from tests.checkpoints.test_retention import make_accessor, new_thread, turn

pytestmark = pytest.mark.django_db(transaction=True)

TEXT = "a sentence of about fifty characters, repeated. " * 10


def seeded(mode: str, turns: int = 4) -> tuple[object, str]:
    acc = make_accessor(mode, 2)
    thread_id = new_thread()
    for index in range(turns):
        turn(acc, thread_id, f"{index} {TEXT}")
    return acc, thread_id


def saver_view(acc, thread_id: str) -> dict:
    items = list(acc.saver.list(thread_config(thread_id)))
    writes = [w for item in items for w in item.pending_writes]
    snapshots = {
        item.checkpoint["channel_versions"]["messages"]
        for item in items
        if isinstance(item.checkpoint["channel_values"].get("messages"), _DeltaSnapshot)
    }
    return {
        "checkpoints": len(items),
        "writes": len(writes),
        "writes_by_channel": Counter(w[1] for w in writes),
        "snapshots": len(snapshots),
        "head": items[0].config["configurable"]["checkpoint_id"],
    }


@pytest.mark.parametrize("mode", ["full", "delta"])
def test_storage_counts_match_the_saver(mode):
    acc, thread_id = seeded(mode)
    report = thread_storage_get(thread_id=thread_id)
    expected = saver_view(acc, thread_id)
    assert report["backend"] == connection.vendor.replace("postgresql", "postgres")
    assert report["checkpoint_count"] == report["tables"]["checkpoints"]["rows"] == expected["checkpoints"]
    assert report["tables"]["writes"]["rows"] == expected["writes"]
    assert {ch: c["write_rows"] for ch, c in report["channels"].items() if c["write_rows"]} == dict(
        expected["writes_by_channel"]
    )
    assert report["snapshot_count"] == expected["snapshots"]
    assert report["head"] == {"checkpoint_id": expected["head"], "checkpoint_ns": "", "channel_mode": mode}
    assert report["orphans"] == {"writes": 0, "blobs": 0, "parents": 0}
    tables = report["tables"]
    assert report["total"]["bytes"] == sum(t["bytes"] for t in tables.values()) > 0
    assert report["total"]["rows"] == sum(t["rows"] for t in tables.values())
    messages = report["channels"]["messages"]
    # Four turns of ~500 characters each way: the stored values and writes hold them.
    assert messages["value_bytes"] + messages["write_bytes"] > 8 * 500
    if connection.vendor == "sqlite":
        assert tables["blobs"] == {"rows": 0, "bytes": 0, "stored_bytes": 0}
    else:
        assert tables["blobs"]["rows"] > 0 and tables["blobs"]["stored_bytes"] > 0


def test_full_mode_has_no_snapshots_and_stores_more_than_delta():
    _, full_thread = seeded("full", turns=6)
    _, delta_thread = seeded("delta", turns=6)
    full, delta = thread_storage_get(thread_id=full_thread), thread_storage_get(thread_id=delta_thread)
    assert full["snapshot_count"] == 0 and full["channels"]["messages"]["snapshots"] == 0
    assert delta["snapshot_count"] == delta["channels"]["messages"]["snapshots"] == 6
    assert full["head"]["channel_mode"] == "full" and delta["head"]["channel_mode"] == "delta"
    assert full["channels"]["messages"]["value_rows"] > delta["channels"]["messages"]["value_rows"]
    assert full["total"]["bytes"] > delta["total"]["bytes"]


def test_orphans_are_counted():
    acc, thread_id = seeded("full", turns=1)
    head = acc.saver.get_tuple(thread_config(thread_id))
    acc.saver.put_writes(thread_config(thread_id, "no-such-checkpoint"), [("messages", []), ("title", "t")], "task-1")
    stray = dict(head.checkpoint, id="1f0ffff0-0000-6000-8000-000000000000")
    acc.saver.put(thread_config(thread_id, "missing-parent"), stray, head.metadata, {})
    assert thread_storage_get(thread_id=thread_id)["orphans"] == {"writes": 2, "blobs": 0, "parents": 1}


def test_empty_thread_reports_zeros():
    report = thread_storage_get(thread_id=new_thread())
    assert report["checkpoint_count"] == 0 and report["snapshot_count"] == 0 and report["head"] is None
    assert report["total"] == {"rows": 0, "bytes": 0, "stored_bytes": 0}
    assert report["channels"] == {}
