"""System checks: the channel mode can be frozen and every registered graph loads.

The graph check carries its own tag so that the commands an operator needs
to repair a deployment (``migrate``, ``create_api_key``,
``prune_checkpoints``, ``bootstrap``) run without it: a user's graph that
fails to import is reported by ``manage.py check`` and at serve time, and
never blocks the schema or the keys (``GraphTolerantChecks``).
"""

from __future__ import annotations

from django.core import checks

from checkpoints.errors import CheckpointModeReconfigurationError

GRAPHS_TAG = "graphs"
CHECKPOINTS_TAG = "checkpoints"


@checks.register(CHECKPOINTS_TAG)
def check_channel_mode(app_configs, **kwargs):
    # System checks import what they check when they run: the apps are loaded by then.
    from checkpoints.modes import process_mode

    try:
        process_mode()
    except (CheckpointModeReconfigurationError, ValueError) as exc:
        return [checks.Error(str(exc), id="checkpoints.E001")]
    return []


@checks.register(GRAPHS_TAG)
def check_graphs_load(app_configs, **kwargs):
    # System checks import what they check when they run: the apps are loaded by then.
    from django.conf import settings

    from checkpoints.graphs import graph_problems

    mode = settings.DEERFLOW_CONFIG.database.checkpoint_channel_mode
    return [
        checks.Error(message, id="checkpoints.E002") if is_error else checks.Warning(message, id="checkpoints.W003")
        for _, is_error, message in graph_problems(mode)
    ]


class GraphTolerantChecks:
    """Mixin for management commands: run every system check except the graph imports."""

    def get_check_kwargs(self, options):
        kwargs = super().get_check_kwargs(options)
        tags = set(kwargs.get("tags") or checks.registry.registry.tags_available()) - {GRAPHS_TAG}
        return {**kwargs, "tags": sorted(tags)}
