from django.core.management.base import BaseCommand

from checkpoints.checks import GraphTolerantChecks
from deerflow_site.services import api_key_create


class Command(GraphTolerantChecks, BaseCommand):
    help = "Create USERNAME if missing and print a new API key (the key is the last line)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="A label for the key, shown in the admin.")

    def handle(self, *args, username: str, name: str, **options):
        user, raw = api_key_create(username=username, name=name)
        self.stdout.write(f"Created an API key for {user}. It is shown once; store it now:")
        self.stdout.write(raw)
