from django.core.management.commands import migrate

from checkpoints.checks import GraphTolerantChecks


class Command(GraphTolerantChecks, migrate.Command):
    """Django's ``migrate``, without the graph-import check: a broken graph must not block the schema."""
