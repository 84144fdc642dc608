"""Raw SQL on LangGraph's tables (module constants, ``%s`` parameters)."""

SQL = {
    "sqlite": {
        "delete_writes": "DELETE FROM writes WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s",
        "delete_checkpoint": (
            "DELETE FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s"
        ),
    },
    "postgres": {
        "delete_writes": (
            "DELETE FROM checkpoint_writes WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s"
        ),
        "delete_checkpoint": (
            "DELETE FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s"
        ),
    },
}
SQLITE_CHECKPOINT_BLOB_SQL = """
SELECT type, checkpoint FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s
"""
SQLITE_REWRITE_CHECKPOINT_SQL = """
UPDATE checkpoints SET type = %s, checkpoint = %s
WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s
"""
POSTGRES_BLOB_SQL = """
SELECT type, blob FROM checkpoint_blobs
WHERE thread_id = %s AND checkpoint_ns = %s AND channel = %s AND version = %s
"""
POSTGRES_DELETE_BLOB_SQL = """
DELETE FROM checkpoint_blobs WHERE thread_id = %s AND checkpoint_ns = %s AND channel = %s AND version = %s
"""
# Only the ``true`` marker goes: a genuine inline value is never touched. Every
# checkpoint at that version loses it, or the walk would seed on ``true``.
POSTGRES_DROP_SNAPSHOT_MARKER_SQL = """
UPDATE checkpoints SET checkpoint = checkpoint #- ARRAY['channel_values', %s]
WHERE thread_id = %s AND checkpoint_ns = %s
  AND checkpoint -> 'channel_versions' ->> %s = %s
  AND checkpoint -> 'channel_values' -> %s = 'true'::jsonb
"""
DANGLING_PARENTS_SQL = """
SELECT COUNT(*) FROM checkpoints c
WHERE c.thread_id = %s AND c.parent_checkpoint_id IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM checkpoints p
    WHERE p.thread_id = c.thread_id AND p.checkpoint_ns = c.checkpoint_ns AND p.checkpoint_id = c.parent_checkpoint_id
)
"""
