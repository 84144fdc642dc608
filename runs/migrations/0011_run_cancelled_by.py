from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("runs", "0010_threadstreamevent_to_threads"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="cancelled_by",
            field=models.ForeignKey(
                blank=True,
                editable=False,
                null=True,
                on_delete=models.deletion.SET_NULL,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
    ]
