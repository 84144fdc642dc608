import secrets
import sys
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from checkpoints.checks import GraphTolerantChecks
from deerflow_site.services import api_key_create


class Command(GraphTolerantChecks, BaseCommand):
    help = "On the first start, create the local admin account and an API key and say how to use them."

    def add_arguments(self, parser):
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="Where the server will listen.")

    def handle(self, *args, url: str, **options):
        from django.conf import settings

        auth = settings.DEERFLOW_CONFIG.auth
        users = get_user_model()
        if not auth.bootstrap_admin or users.objects.filter(username=auth.admin_username).exists():
            self.stdout.write(
                f"Admin console: {url}/admin/  ·  API: {url}/api  ·  docs: {url}/api/docs\n"
                f"New API key: make key NAME=USERNAME (or {manage_py()} create_api_key USERNAME), "
                "or Add in the console's API keys page"
            )
            return
        password = secrets.token_urlsafe(12)
        users.objects.create_superuser(username=auth.admin_username, email="", password=password)
        _, key = api_key_create(username=auth.admin_username, name="bootstrap")
        self.stdout.write(
            "\n".join(
                [
                    "First start: created a local admin account and an API key (shown once).",
                    f"  Admin console : {url}/admin/   user {auth.admin_username!r}  password {password}",
                    f"  API key       : {key}",
                    f"  API docs      : {url}/api/docs",
                    f'  Try it        : curl -H "x-api-key: {key}" -X POST {url}/api/threads -d "{{}}" -H "content-type: application/json"',
                    f'  Python SDK    : get_client(url="{url}/api", api_key="{key}")',
                    f"  More keys     : make key NAME=USERNAME (or {manage_py()} create_api_key USERNAME)",
                ]
            )
        )


def manage_py() -> str:
    """The manage.py command line with this interpreter (the venv's): a bare `python` has no Django."""
    python = Path(sys.executable)
    if python.is_relative_to(Path.cwd()):
        return f"./{python.relative_to(Path.cwd())} manage.py"
    return f"{python} manage.py"
