from django.core.management.base import BaseCommand, CommandError

from checkpoints.checks import GraphTolerantChecks
from threads.models import ThreadMeta
from threads.search import message_index_available, thread_message_index_refresh

# Threads per progress line.
PROGRESS_EVERY = 500


class Command(GraphTolerantChecks, BaseCommand):
    help = (
        "Rewrite the message index (the console's full-text search) from each thread's head: every thread, "
        "or the ids given. Runs and state updates keep it current; this fills it for threads written before "
        "the index existed or brought in by import_deerflow. Safe to repeat."
    )

    def add_arguments(self, parser):
        parser.add_argument("thread_ids", nargs="*", help="Only these threads (default: all).")

    def handle(self, *args, thread_ids: list[str], **options):
        if not message_index_available():
            raise CommandError("This database backend has no message index (SQLite or PostgreSQL only).")
        threads = ThreadMeta.objects.order_by("thread_id")
        if thread_ids:
            threads = threads.filter(thread_id__in=thread_ids)
            if missing := sorted(set(thread_ids) - set(threads.values_list("thread_id", flat=True))):
                raise CommandError(f"No thread {', '.join(missing)}.")
        total, indexed, skipped = threads.count(), 0, []
        for done, thread_id in enumerate(threads.values_list("thread_id", flat=True).iterator(), 1):
            if thread_message_index_refresh(thread_id=thread_id):
                indexed += 1
            else:
                skipped.append(thread_id)
            if done % PROGRESS_EVERY == 0:
                self.stdout.write(f"{done}/{total} threads")
        self.stdout.write(f"Indexed the messages of {indexed} of {total} thread(s).")
        if skipped:
            # A thread whose head this process cannot read (another channel mode, a graph not served).
            self.stdout.write(f"Not readable here, left as they were: {', '.join(skipped[:20])}")
