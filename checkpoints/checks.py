"""System checks: the channel mode can be frozen and every registered graph loads."""

from __future__ import annotations

from django.core import checks

from checkpoints.errors import CheckpointModeReconfigurationError


@checks.register()
def check_channel_mode(app_configs, **kwargs):
    from checkpoints.modes import process_mode

    try:
        process_mode()
    except (CheckpointModeReconfigurationError, ValueError) as exc:
        return [checks.Error(str(exc), id="checkpoints.E001")]
    return []


@checks.register()
def check_graphs_load(app_configs, **kwargs):
    from checkpoints.graphs import _load_builder, registered_graphs

    errors = []
    for spec in registered_graphs().values():
        try:
            _load_builder(spec.import_path)
        except Exception as exc:  # any import or type error is a configuration error
            errors.append(
                checks.Error(
                    f"Graph {spec.graph_id!r} ({spec.import_path}) does not load: {exc}", id="checkpoints.E002"
                )
            )
    return errors
