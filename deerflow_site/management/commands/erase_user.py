from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from checkpoints.checks import GraphTolerantChecks
from core.errors import DomainError
from deerflow_site.user_erase import user_erase, user_erase_check


class Command(GraphTolerantChecks, BaseCommand):
    help = (
        "Erase USERNAME and everything they own: threads (runs, events, checkpoints), runs on other threads, "
        "assistants, crons, projects, Store items, API keys, the account. Prints what it erases; "
        "--dry-run only counts it."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--dry-run", action="store_true", help="Count what would be erased; erase nothing.")
        parser.add_argument(
            "--cancel-runs", action="store_true", help="Cancel the user's unfinished runs first (else: refused)."
        )

    def handle(self, *args, username: str, dry_run: bool, cancel_runs: bool, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r}.")
        try:
            if dry_run:
                holdings = user_erase_check(user=user, by=None, cancel_runs=True)
                self.stdout.write(f"Would erase {username}: {holdings.summary()}.")
                if holdings.unfinished_runs:
                    self.stdout.write(f"{holdings.unfinished_runs} run(s) are unfinished: add --cancel-runs.")
                return
            holdings = user_erase(user=user, cancel_runs=cancel_runs)
        except DomainError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Erased {username}: {holdings.summary()}.")
