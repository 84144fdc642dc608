"""``ThreadStreamEvent`` now belongs to ``threads`` (``threads.0007_threadstreamevent``): drop it from state only.

The table and its rows stay; ``threads`` owns them from here on.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0009_interrupt_answer"),
        ("threads", "0007_threadstreamevent"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="ThreadStreamEvent")],
        ),
    ]
