"""The message index behind the console's full-text search (``threads.search``): raw tables, no model.

One row per thread holds the newest ``MESSAGE_INDEX_MAX_CHARS`` characters
of its head's message text. SQLite indexes it with an FTS5 table over that
row (external content, kept in step by triggers); PostgreSQL with a stored
``tsvector`` column under a GIN index, plus a trigram index when ``pg_trgm``
can be installed (phrase search uses it; without it a phrase scans the
bounded table). A trigger drops a thread's row when the thread row goes.
On SQLite, a later migration that makes Django rebuild ``threads_threadmeta``
(copy, drop, rename: some column changes) drops that trigger with the old
table and must create it again; ``tests/console/test_search.py``
(``test_the_index_row_goes_with_its_thread``) fails until it does.
"""

from django.db import migrations

SQLITE = [
    """CREATE TABLE threads_message_text (
        id INTEGER PRIMARY KEY, thread_id varchar(64) NOT NULL UNIQUE, body TEXT NOT NULL)""",
    """CREATE VIRTUAL TABLE threads_message_fts USING fts5(
        body, content='threads_message_text', content_rowid='id', tokenize='unicode61 remove_diacritics 2')""",
    """CREATE TRIGGER threads_message_text_ai AFTER INSERT ON threads_message_text BEGIN
        INSERT INTO threads_message_fts(rowid, body) VALUES (new.id, new.body); END""",
    """CREATE TRIGGER threads_message_text_ad AFTER DELETE ON threads_message_text BEGIN
        INSERT INTO threads_message_fts(threads_message_fts, rowid, body) VALUES ('delete', old.id, old.body); END""",
    """CREATE TRIGGER threads_message_text_au AFTER UPDATE ON threads_message_text BEGIN
        INSERT INTO threads_message_fts(threads_message_fts, rowid, body) VALUES ('delete', old.id, old.body);
        INSERT INTO threads_message_fts(rowid, body) VALUES (new.id, new.body); END""",
    """CREATE TRIGGER threads_message_text_thread_gone AFTER DELETE ON threads_threadmeta BEGIN
        DELETE FROM threads_message_text WHERE thread_id = old.thread_id; END""",
]
SQLITE_REVERSE = [
    "DROP TRIGGER threads_message_text_thread_gone",
    "DROP TABLE threads_message_fts",
    "DROP TABLE threads_message_text",
]

POSTGRES = [
    """CREATE TABLE threads_message_text (
        thread_id varchar(64) PRIMARY KEY, body text NOT NULL,
        body_tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', body)) STORED)""",
    "CREATE INDEX threads_message_text_tsv ON threads_message_text USING GIN (body_tsv)",
    # Only a superuser (or a trusted-extension owner) may install pg_trgm; without it, no trigram index.
    """DO $$ BEGIN CREATE EXTENSION IF NOT EXISTS pg_trgm;
        EXCEPTION WHEN OTHERS THEN RAISE NOTICE 'pg_trgm unavailable: phrase search scans the message index';
        END $$""",
    """DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
        CREATE INDEX threads_message_text_trgm ON threads_message_text USING GIN (body gin_trgm_ops);
        END IF; END $$""",
    """CREATE FUNCTION threads_message_text_thread_gone() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN DELETE FROM threads_message_text WHERE thread_id = OLD.thread_id; RETURN OLD; END $$""",
    """CREATE TRIGGER threads_message_text_thread_gone AFTER DELETE ON threads_threadmeta
        FOR EACH ROW EXECUTE FUNCTION threads_message_text_thread_gone()""",
    """CREATE FUNCTION threads_message_text_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN TRUNCATE threads_message_text; RETURN NULL; END $$""",
    """CREATE TRIGGER threads_message_text_truncate AFTER TRUNCATE ON threads_threadmeta
        FOR EACH STATEMENT EXECUTE FUNCTION threads_message_text_truncate()""",
]
POSTGRES_REVERSE = [
    "DROP TRIGGER threads_message_text_truncate ON threads_threadmeta",
    "DROP FUNCTION threads_message_text_truncate()",
    "DROP TRIGGER threads_message_text_thread_gone ON threads_threadmeta",
    "DROP FUNCTION threads_message_text_thread_gone()",
    "DROP TABLE threads_message_text",
]


def _run(statements_by_vendor):
    def run(apps, schema_editor):
        for statement in statements_by_vendor.get(schema_editor.connection.vendor, ()):
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("threads", "0008_threadmeta_export_permission"),
    ]

    operations = [
        migrations.RunPython(
            _run({"sqlite": SQLITE, "postgresql": POSTGRES}),
            _run({"sqlite": SQLITE_REVERSE, "postgresql": POSTGRES_REVERSE}),
        ),
    ]
