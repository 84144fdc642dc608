"""The few lines a server prints as it starts: what it serves, from which file, on what."""

from __future__ import annotations

from django.conf import settings


def database_identity(db: dict) -> str:
    """Name a Django database without its credentials: engine and file, or host, port and name."""
    engine = db["ENGINE"].rsplit(".", 1)[-1]
    if engine == "sqlite3":
        return f"SQLite {db['NAME']}"
    return f"PostgreSQL {db.get('HOST') or 'localhost'}:{db.get('PORT') or 5432}/{db['NAME']}"


def startup_banner() -> list[str]:
    """Return the start-up summary: config file, database, channel mode and cadence, graphs, CORS, transports,
    and the langgraph.json served with the build settings it carries that mean nothing here."""
    config = settings.DEERFLOW_CONFIG
    cors = settings.DEERFLOW["CORS"]
    origins = [*cors.allow_origins, *([f"~{cors.allow_origin_regex}"] if cors.allow_origin_regex else [])]
    lines = [
        f"config      {config._source if config._source.exists() else 'built-in defaults (no config.yaml)'}",
        f"database    {database_identity(settings.DATABASES['default'])}",
        f"checkpoints {config.database.checkpoint_channel_mode} mode, "
        f"snapshot every {config.database.checkpoint_delta.snapshot_frequency}",
        f"graphs      {', '.join(sorted({'lead_agent', *settings.DEERFLOW['GRAPHS']}))}",
        f"cors        {', '.join(origins) if origins else 'off (no browser origin allowed)'}",
        f"transports  stream bridge {config.stream_bridge.type}, channel layer {config.channel_layer.type}, "
        f"runs {'executed here' if config.runs.execute_in_server else 'executed by run_workers'}",
    ]
    if project := settings.DEERFLOW["LANGGRAPH_JSON"]:
        lines.append(f"project     {project}")
        if skipped := settings.DEERFLOW["LANGGRAPH_NOT_APPLICABLE"]:
            lines.append(f"            not applicable here (build settings): {', '.join(skipped)}")
    return lines
