"""The thread event log moved from ``runs`` to ``threads`` in Django's state only: its table and rows stay."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

MOVE = [("threads", "0007_threadstreamevent"), ("runs", "0010_threadstreamevent_to_threads")]


# Outside a test transaction: SQLite's schema editor, even collecting SQL, refuses to open inside one.
@pytest.mark.django_db(transaction=True)
def test_the_move_runs_no_sql_so_a_database_at_the_old_head_keeps_its_rows():
    executor = MigrationExecutor(connection)
    plan = [(executor.loader.graph.nodes[key], False) for key in MOVE]
    statements = executor.loader.collect_sql(plan)
    assert [sql for sql in statements if not sql.startswith("--")] == []  # comments name each operation


@pytest.mark.django_db
def test_the_log_keeps_its_table_while_its_owner_changes_from_runs_to_threads():
    loader = MigrationExecutor(connection).loader
    before = loader.project_state(MOVE[0], at_end=False).apps
    after = loader.project_state(MOVE[1]).apps
    old = before.get_model("runs", "ThreadStreamEvent")
    new = after.get_model("threads", "ThreadStreamEvent")
    assert old._meta.db_table == new._meta.db_table == "runs_threadstreamevent"
    with pytest.raises(LookupError):
        after.get_model("runs", "ThreadStreamEvent")
