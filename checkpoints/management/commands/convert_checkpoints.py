"""``manage.py convert_checkpoints --to full``: store delta threads the full way, verified, with a dry run."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction

from checkpoints.backend import current_backend
from checkpoints.checks import GraphTolerantChecks
from checkpoints.convert import CONVERTED, SKIPPED, ThreadConversion, thread_convert
from checkpoints.encryption import thread_sealing_context
from checkpoints.storage import UnsupportedBackendError, require_table_backend
from checkpoints.thread_stats import delta_heads_sql
from core.custom_encryption import context_argument, fixed_scope
from core.errors import DomainError


def _unfinished_run_guard(thread) -> Callable[[], None]:
    """Return a check refusing the thread while one of its runs is unfinished.

    It runs inside the conversion's write transaction: on SQLite that holds
    the database's write lock, so no run can be admitted after the check;
    on PostgreSQL the caller also holds the thread row, which admission locks.
    """
    # threads sits above checkpoints: this edge asks the thread records, the conversion never does.
    from threads.selectors import thread_idle_check

    def guard() -> None:
        thread_idle_check(thread.thread_id, then="convert it after the run finishes")

    return guard


@contextmanager
def _admission_held(thread) -> Iterator[None]:
    """Keep runs of ``thread`` from being admitted until its conversion commits.

    PostgreSQL: hold the thread row, which admission locks. SQLite: nothing
    to hold here; the conversion's write transaction locks the whole
    database, and a transaction opened here would pin a snapshot older than
    the guard's check.
    """
    if connection.vendor == "sqlite":
        yield
        return
    with transaction.atomic():
        type(thread).objects.select_for_update().filter(pk=thread.pk).exists()
        yield


class Command(GraphTolerantChecks, BaseCommand):
    help = (
        "Convert delta threads to full storage: every checkpoint (all branches and namespaces, same ids) "
        "gets its materialized messages, then the thread is read back in full mode and compared with its "
        "delta reading before the change is committed. Full threads are skipped. --dry-run changes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("--to", required=True, choices=["full"], help="The storage to convert to.")
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--thread", action="append", dest="threads", metavar="ID", help="A thread (repeatable).")
        target.add_argument("--all", action="store_true", dest="all_threads", help="Every delta thread.")
        target.add_argument("--owner", metavar="USER", help="Every delta thread of this username.")
        parser.add_argument("--dry-run", action="store_true", help="Report what would change; change nothing.")
        parser.add_argument(
            "--context",
            default="{}",
            help="With custom blob handlers: the encryption context (a JSON object) for a thread none of whose "
            "checkpoints they sealed; the others are sealed with their own.",
        )

    def handle(self, *args, threads, all_threads, owner, dry_run, context, **options):
        try:
            require_table_backend()
            self.default_context = context_argument(context)
        except (UnsupportedBackendError, ValueError) as exc:
            raise CommandError(str(exc)) from None
        selected = self._selected(threads, all_threads, owner)
        failed, done = {}, []
        for index, thread in enumerate(selected, 1):
            progress = f"[{index}/{len(selected)}] "
            try:
                result = self._convert(thread, dry_run=dry_run)
            except DomainError as exc:
                failed[thread.thread_id] = str(exc)
                self.stderr.write(f"{progress}thread {thread.thread_id}: not converted: {exc}")
                continue
            done.append(result)
            self.stdout.write(progress + self._line(result, dry_run=dry_run))
        if len(failed) == 1:
            [(thread_id, reason)] = failed.items()
            raise CommandError(reason if reason.startswith("Thread ") else f"Thread {thread_id}: {reason}")
        if failed:
            raise CommandError(f"{len(failed)} threads not converted: {', '.join(failed)}")
        self.stdout.write(self._summary(done, dry_run=dry_run))

    def _selected(self, threads: list[str] | None, all_threads: bool, owner: str | None) -> list:
        # threads sits above checkpoints: the edge finds the records, the conversion takes ids and graphs.
        from threads.models import ThreadMeta

        if threads:
            found = {t.thread_id: t for t in ThreadMeta.objects.filter(thread_id__in=threads)}
            if missing := [thread_id for thread_id in threads if thread_id not in found]:
                raise CommandError(f"Thread {missing[0]} not found")
            return [found[thread_id] for thread_id in dict.fromkeys(threads)]
        sql = delta_heads_sql()
        assert sql is not None, "handle() refused the memory backend"
        with connection.cursor() as cursor:
            cursor.execute(sql)
            delta_ids = [row[0] for row in cursor.fetchall()]
        chosen = ThreadMeta.objects.filter(thread_id__in=delta_ids)
        if not all_threads:
            chosen = chosen.filter(owner__username=owner)
        return list(chosen.order_by("thread_id"))

    def _convert(self, thread, *, dry_run: bool) -> ThreadConversion:
        guard = _unfinished_run_guard(thread)
        if dry_run:
            return thread_convert(thread_id=thread.thread_id, graph_id=thread.assistant_id, dry_run=True)
        guard()  # refuse before opening any transaction
        # Custom blob handlers: the new checkpoints are sealed with the context the thread's were.
        context = thread_sealing_context(connection, current_backend().kind, thread.thread_id)
        with _admission_held(thread), fixed_scope(self.default_context if context is None else context):
            return thread_convert(thread_id=thread.thread_id, graph_id=thread.assistant_id, guard=guard)

    def _line(self, result: ThreadConversion, *, dry_run: bool) -> str:
        head = f"thread {result.thread_id}{' [dry run]' if dry_run else ''}: {result.outcome}"
        if result.reason:
            return f"{head} ({result.reason})"
        if result.outcome == CONVERTED:
            return (
                f"{head} {result.checkpoints} checkpoint(s), verified; "
                f"{result.bytes_before:,} -> {result.bytes_after:,} bytes"
            )
        return f"{head} {result.checkpoints} checkpoint(s), {result.bytes_before:,} bytes now"

    def _summary(self, results: list[ThreadConversion], *, dry_run: bool) -> str:
        changed = [r for r in results if r.outcome != SKIPPED]
        checkpoints = sum(r.checkpoints for r in changed)
        size = sum(r.bytes_before for r in changed)
        verb = "would convert" if dry_run else "converted"
        skipped = len(results) - len(changed)
        return (
            f"{verb} {len(changed)} thread(s), {checkpoints} checkpoint(s), {size:,} bytes before; skipped {skipped}."
        )
