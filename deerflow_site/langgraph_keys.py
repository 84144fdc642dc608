"""Every ``langgraph.json`` key, accounted for: honoured, a build setting, or refused out loud.

The keys are those of LangGraph's own schema (``libs/cli/schemas/schema.json``
at langgraph f09cfe8). A project's file is walked key by key at start-up:

- **honoured** keys are served as ``langgraph dev`` serves them;
- **build** keys shape a deployment image (Python version, Dockerfile lines,
  base image…) and mean nothing to a server that runs in the operator's own
  environment: accepted, listed once in the start-up banner;
- **warn** keys ask for a capability this server does not have yet, whose
  absence leaves data and access as they are: a warning naming the key and
  what happens instead;
- **refuse** keys carry a promise about data or access (LangSmith keys
  beside custom auth, encryption at rest, a checkpointer elsewhere, a
  narrower webhook policy)
  that silently ignoring would break: start-up stops with one line naming
  the key.

A key the schema does not know is a warning naming the closest one. A
``warn`` key set to its default (``false``, ``null``, ``{}``, ``[]``) asks
for nothing, so it is not reported.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Literal

Treatment = Literal["honoured", "build", "warn", "refuse"]


@dataclass(frozen=True)
class Key:
    treatment: Treatment
    here: str  # what the key does on this server (the docs table's last column)


_BUILD = "a deployment-image setting; this server runs in your own environment"

# Keys whose sub-keys are walked one by one; any other key's value is taken whole.
KEYS: dict[str, Key] = {
    "$schema": Key("honoured", "the JSON schema's address, for editors; nothing for a server to do"),
    "graphs": Key("honoured", "served, `{path, description}` objects included"),
    "dependencies": Key(
        "honoured",
        "local folders go on the import path; package requirements are for the image build "
        "(install them into this server's environment yourself)",
    ),
    "env": Key("honoured", "an object or a `.env` path, applied before the graphs load"),
    "http": Key("honoured", "see its keys"),
    "http.cors": Key("honoured", "applies unless config.yaml has its own `cors:`"),
    "http.app": Key(
        "honoured",
        "a Starlette/FastAPI app: its routes are served first, beside the API, its lifespan inside ours",
    ),
    "http.disable_assistants": Key("honoured", "the /assistants routes are not served (404)"),
    "http.disable_runs": Key("honoured", "the run and cron routes are not served (404)"),
    "http.disable_threads": Key(
        "honoured", "the /threads routes (their runs aside) and DeerFlow's /projects are not served"
    ),
    "http.disable_store": Key("honoured", "the /store routes are not served (404)"),
    "http.disable_meta": Key("honoured", "/ok, /info, /metrics, /openapi.json and /docs are not served (404)"),
    "http.disable_webhooks": Key(
        "honoured", "a run's `webhook` is accepted and never called; A2A push notification configs are refused"
    ),
    "http.disable_mcp": Key("honoured", "the /mcp route is not served (404)"),
    "http.disable_a2a": Key("honoured", "the /a2a routes and the agent card are not served (404)"),
    "http.disable_ui": Key("honoured", "this server has no /ui routes"),
    "http.enable_custom_route_auth": Key("honoured", "the `http.app` routes pass custom auth's authenticate first"),
    "http.middleware_order": Key(
        "honoured",
        "the `http.app`'s middleware runs on every route; `auth_first` identifies the caller before it "
        "(`request.user`), `middleware_first` (the default) after it",
    ),
    "http.mount_prefix": Key(
        "honoured", "the API (and `http.app`'s routes) are served under the prefix too; /api/ keeps serving"
    ),
    "http.configurable_headers": Key(
        "honoured",
        "request headers its `includes` match (and no `excludes`) are copied into the `configurable` of a run "
        "started over REST or a protocol-v2 command (HTTP or WebSocket); never a header that looks like a secret",
    ),
    "http.logging_headers": Key(
        "honoured",
        "request headers its `includes` match (and no `excludes`) are added to the access log line; "
        "never a header that looks like a secret",
    ),
    "store": Key("honoured", "see its keys"),
    "store.index": Key(
        "honoured",
        "`{dims, embed, fields}`: items are embedded on put and a search `query` ranks them by cosine similarity "
        "(sqlite-vec or our scoring on SQLite, pgvector or an exact scan on PostgreSQL; docs/store.md); "
        "`manage.py reindex_store` re-embeds after a change",
    ),
    "store.ttl": Key(
        "honoured",
        "`default_ttl` minutes is the TTL of an item written without its own (through the API or a graph); "
        "reads never extend a TTL (`refresh_on_read` is a warning); expired items are swept on each read",
    ),
    "checkpointer": Key("honoured", "see its keys"),
    "checkpointer.ttl": Key(
        "honoured",
        "`default_ttl` minutes and `strategy` are the TTL of every thread created without its own "
        "(implicitly created ones included); the run workers sweep on every poll, whatever `sweep_interval_minutes`",
    ),
    "checkpointer.serde": Key("warn", "not applied: checkpoints use LangGraph's default serializer"),
    "checkpointer.path": Key(
        "refuse", "checkpoints are stored in the database config.yaml names (`database:`); remove the key"
    ),
    "auth": Key("honoured", "see its keys; without `auth.path` this server's API keys and sessions apply"),
    "auth.path": Key(
        "honoured",
        "the `Auth`'s authenticate handler is the only identity (HTTP, SSE, WebSocket); its handlers for "
        "threads, assistants, crons and the Store apply (filters in SQL; docs/api.md)",
    ),
    "auth.cache": Key("honoured", "successful authentications are cached per `cache_keys` headers, in each process"),
    "auth.openapi": Key(
        "honoured", "/api/openapi.json documents its security schemes and requirements instead of the API key"
    ),
    "auth.disable_studio_auth": Key("honoured", "this server has no LangSmith Studio auth to disable"),
    "auth.allow_langsmith_api_keys": Key(
        "refuse", "LangSmith API keys cannot be checked here; remove it (custom auth alone identifies callers)"
    ),
    "encryption": Key("honoured", "see its keys"),
    "encryption.path": Key(
        "honoured",
        "the `Encryption`'s JSON handlers seal thread, run, assistant and cron JSON fields, its blob handlers "
        "checkpoints; the context is X-Encryption-Context through `@encryption.context` (docs/operations.md)",
    ),
    "webhooks": Key("honoured", "see its keys"),
    "webhooks.url": Key(
        "refuse",
        "this URL policy cannot be enforced here; remove it and set `runs.webhooks` in config.yaml "
        "(private addresses are refused by default)",
    ),
    "webhooks.headers": Key("warn", "not applied: webhooks are sent without extra headers"),
    "webhooks.env_prefix": Key("warn", "not applied (see `webhooks.headers`)"),
    "ui": Key("warn", "not served: this server has no /ui routes for generative UI components"),
    **{
        name: Key("build", _BUILD)
        for name in (
            "python_version",
            "node_version",
            "pip_config_file",
            "pip_installer",
            "base_image",
            "image_distro",
            "keep_pkg_tools",
            "dockerfile_lines",
            "api_version",
            "source",
            "_INTERNAL_docker_tag",
        )
    },
}
_WALKED = {"http", "store", "checkpointer", "webhooks", "auth", "encryption"}


@dataclass
class KeyReport:
    """What a project's ``langgraph.json`` asks for, sorted by treatment."""

    build: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)


def _asks_for_something(value: Any) -> bool:
    return value not in (None, False, {}, [], "")


def _closest(name: str, siblings: list[str]) -> str:
    found = difflib.get_close_matches(name, siblings, n=1)
    return f" (did you mean {found[0]!r}?)" if found else ""


def account(data: dict[str, Any], *, prefix: str = "") -> KeyReport:
    """Sort every key of ``data`` (a langgraph.json object, or one of its walked sections)."""
    report = KeyReport()
    siblings = [k.removeprefix(prefix) for k in KEYS if k.startswith(prefix) and "." not in k.removeprefix(prefix)]
    for name, value in data.items():
        path = f"{prefix}{name}"
        key = KEYS.get(path)
        if key is None:
            report.warnings.append(f"{path}: not a langgraph.json key{_closest(name, siblings)}; it is ignored")
        elif path in _WALKED and isinstance(value, dict):
            inner = account(value, prefix=f"{path}.")
            report.build += inner.build
            report.warnings += inner.warnings
            report.refusals += inner.refusals
        elif key.treatment == "build":
            report.build.append(path)
        elif key.treatment == "warn" and _asks_for_something(value):
            report.warnings.append(f"{path}: {key.here}")
        elif key.treatment == "refuse" and _asks_for_something(value):
            report.refusals.append(f"{path}: {key.here}")
    return report
