"""The thread event log becomes the thread's: ``ThreadStreamEvent`` moves from ``runs`` in state only.

The table (``runs_threadstreamevent``), its rows, constraint and foreign key
stay as they are; only Django's idea of which app owns the model changes
(``runs.0010_threadstreamevent_to_threads`` drops it from ``runs``' state).
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("threads", "0006_threadmeta_state_updating_at"),
        ("runs", "0009_interrupt_answer"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ThreadStreamEvent",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("seq", models.PositiveBigIntegerField()),
                        ("event_id", models.CharField(max_length=255)),
                        ("run_id", models.CharField(blank=True, default="", max_length=64)),
                        ("method", models.CharField(max_length=32)),
                        ("namespace", models.JSONField(blank=True, default=list)),
                        ("data", models.JSONField(blank=True, null=True)),
                        ("timestamp", models.BigIntegerField()),
                        (
                            "thread",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="stream_events",
                                to="threads.threadmeta",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "runs_threadstreamevent",
                        "ordering": ("thread", "seq"),
                        "constraints": [
                            models.UniqueConstraint(fields=("thread", "seq"), name="uq_stream_events_thread_seq")
                        ],
                    },
                ),
            ],
        ),
    ]
