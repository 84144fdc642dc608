from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("threads", "0007_threadstreamevent"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="threadmeta",
            options={
                "ordering": ("-updated_at",),
                "permissions": [
                    ("apply_retention", "Can apply checkpoint retention to threads"),
                    ("export_threadmeta", "Can export threads (messages, run inputs, branches)"),
                ],
                "verbose_name": "thread",
            },
        ),
    ]
