"""Load and validate the YAML configuration file.

The ``database:`` section keeps DeerFlow's keys, defaults, bounds and messages
(pydantic produces the same validation texts DeerFlow's models produce), so a
DeerFlow ``config.yaml`` works here unchanged: its ``$VAR`` values, its
``config_version`` warning, its numbers, its ``run_events:`` and deprecated
``checkpointer:``/``store:`` sections are read as DeerFlow reads them, or
refused in one line where they cannot mean anything here. The other sections
are ours.

The file is named by env ``DEERFLOW_CONFIG`` (default ``config.yaml`` in the
project root). A missing default file means built-in defaults; a missing file
named explicitly is an error. Any invalid value stops start-up with an
``ImproperlyConfigured`` naming the key.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from django.core.exceptions import ImproperlyConfigured
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from deerflow_site.graph_sources import GraphSources, graph_path_problem, resolve_graph_sources

logger = logging.getLogger(__name__)

BASE_DIR = Path(__file__).resolve().parent.parent
CONFIG_ENV = "DEERFLOW_CONFIG"
DEFAULT_CONFIG_PATH = BASE_DIR / "config.yaml"

CheckpointChannelMode = Literal["full", "delta"]
DEFAULT_CHECKPOINT_SNAPSHOT_FREQUENCY = 10
DEFAULT_POSTGRES_POOL_SIZE = 10
LEGACY_SNAPSHOT_KEY = "checkpoint_delta_snapshot_frequency"

# DeerFlow's three warnings for the deprecated flat cadence key, verbatim.
WARN_LEGACY_AND_NESTED = (
    "Both database.checkpoint_delta_snapshot_frequency (deprecated) and "
    "database.checkpoint_delta.snapshot_frequency are set; the nested key wins."
)
WARN_LEGACY_IGNORED = (
    "Ignoring deprecated database.checkpoint_delta_snapshot_frequency because database.checkpoint_delta is already set."
)
WARN_LEGACY_CARRIED = (
    "database.checkpoint_delta_snapshot_frequency is deprecated; use "
    "database.checkpoint_delta.snapshot_frequency instead. Carried the legacy value (%r) forward."
)


def _not_a_bool(value: Any) -> Any:
    # YAML ``true`` must not become 1 (DeerFlow's cadence bug); "10" is a number
    # as DeerFlow's models read it, and what a ``$VAR`` always resolves to.
    if isinstance(value, bool):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


ConfigInt = Annotated[int, BeforeValidator(_not_a_bool)]


class _Section(BaseModel):
    # Unknown keys are ignored, as in DeerFlow, so a DeerFlow config loads as is.
    model_config = ConfigDict(extra="ignore")


class CheckpointDeltaConfig(_Section):
    """Tune ``checkpoint_channel_mode: delta``; restart-required like the mode."""

    snapshot_frequency: ConfigInt = Field(default=DEFAULT_CHECKPOINT_SNAPSHOT_FREQUENCY, ge=1)


class CheckpointGraphCacheConfig(_Section):
    """Cap the process-local cache of compiled accessor graphs (hot, not frozen)."""

    accessor_graph_max: ConfigInt = Field(default=64, ge=1)


class CheckpointStateCacheConfig(_Section):
    """Bound the process-local cache of encoded thread states (``checkpoints.state_cache``); 0 turns it off."""

    max_mb: ConfigInt = Field(default=64, ge=0)


class CheckpointCacheConfig(_Section):
    """Configure the delta-history cache; performance only, may differ per process."""

    type: Literal["memory", "redis"] = "memory"
    max_entries: ConfigInt = Field(default=128, ge=0)
    redis_url: str | None = None
    ttl_seconds: ConfigInt = Field(default=86400, ge=0)
    key_prefix: str = ""

    def resolved_redis_url(self) -> str:
        """Return the Redis URL by DeerFlow's fallback chain."""
        return (
            self.redis_url
            or os.environ.get("DEER_FLOW_CHECKPOINT_CACHE_REDIS_URL")
            or os.environ.get("REDIS_URL")
            or "redis://localhost:6379/0"
        )


class DatabaseConfig(_Section):
    """The one backend of all five stores: checkpointer, Store, threads, runs, events."""

    backend: Literal["memory", "sqlite", "postgres"] = "sqlite"
    sqlite_dir: str = "./var"
    postgres_url: str = ""
    # Apply unapplied migrations when `serve` starts (one process at a time);
    # false: refuse to serve an outdated schema, naming the command that migrates.
    auto_migrate: bool = True
    # Each of a process's three PostgreSQL pools (Django's and the savers' sync
    # and async ones) opens at most this many connections: a process holds at
    # most three times it (the Platform's LANGGRAPH_POSTGRES_POOL_MAX_SIZE).
    postgres_pool_size: ConfigInt = Field(default=DEFAULT_POSTGRES_POOL_SIZE, ge=2)
    checkpoint_channel_mode: CheckpointChannelMode = "full"
    checkpoint_delta: CheckpointDeltaConfig = Field(default_factory=CheckpointDeltaConfig)
    checkpoint_graph_cache: CheckpointGraphCacheConfig = Field(default_factory=CheckpointGraphCacheConfig)
    checkpoint_cache: CheckpointCacheConfig = Field(default_factory=CheckpointCacheConfig)
    checkpoint_state_cache: CheckpointStateCacheConfig = Field(default_factory=CheckpointStateCacheConfig)

    @model_validator(mode="before")
    @classmethod
    def _migrate_legacy_snapshot_frequency(cls, data: Any) -> Any:
        """Carry the deprecated flat cadence key onto the nested one; nested wins."""
        if not isinstance(data, dict) or LEGACY_SNAPSHOT_KEY not in data:
            return data
        data = dict(data)
        legacy_value = data.pop(LEGACY_SNAPSHOT_KEY)
        nested = data.get("checkpoint_delta")
        if isinstance(nested, dict):
            if "snapshot_frequency" in nested:
                logger.warning(WARN_LEGACY_AND_NESTED)
                return data
            data["checkpoint_delta"] = {**nested, "snapshot_frequency": legacy_value}
        elif nested is None:
            data["checkpoint_delta"] = {"snapshot_frequency": legacy_value}
        else:
            logger.warning(WARN_LEGACY_IGNORED)
            return data
        logger.warning(WARN_LEGACY_CARRIED, legacy_value)
        return data

    @property
    def sqlite_path(self) -> Path:
        """Return the one SQLite file shared by Django and LangGraph tables."""
        directory = Path(self.sqlite_dir)
        if not directory.is_absolute():
            directory = BASE_DIR / directory
        return directory / "deerflow.db"


# What DeerFlow's ``run_events.backend`` may say here: events always live in
# the ``database:`` backend (DeerFlow's ``db``). ``memory``, DeerFlow's
# default, loses them at a restart there; here they are kept all the same.
RUN_EVENT_BACKENDS = ("db", "memory")


class RunEventsConfig(_Section):
    """DeerFlow's ``run_events:`` section: where run events are kept and what a run records."""

    backend: str = "memory"
    max_trace_content: ConfigInt = Field(default=10240, ge=0)
    track_token_usage: bool = True

    @field_validator("backend")
    @classmethod
    def _offered(cls, value: str) -> str:
        if value not in RUN_EVENT_BACKENDS:
            raise ValueError(
                f"{value!r} is not offered here: run events are kept in the database: backend; "
                f"write {' or '.join(RUN_EVENT_BACKENDS)}"
            )
        return value


class RedisConfig(_Section):
    """Where Redis lives when a section below selects it (env ``REDIS_URL`` wins)."""

    url: str = "redis://127.0.0.1:6379/0"

    def resolved_url(self) -> str:
        """Return the Redis URL, letting env ``REDIS_URL`` override the file."""
        return os.environ.get("REDIS_URL") or self.url


class StreamBridgeConfig(_Section):
    """How run stream events travel between processes."""

    type: Literal["memory", "redis"] = "memory"
    # Events kept per run for Last-Event-ID replay (Redis XADD MAXLEN ~).
    max_events: ConfigInt = Field(default=10000, ge=1)
    stream_ttl_seconds: ConfigInt = Field(default=86400, ge=1)
    heartbeat_seconds: float = Field(default=5.0, gt=0)


class ThreadStreamConfig(_Section):
    """The durable per-thread protocol event log (``/threads/{id}/stream/events``)."""

    # Events kept per thread, oldest dropped at each run's end; 0 keeps the whole
    # log for as long as the thread lives. A ``since`` older than what is kept
    # is answered ``resume_gap``.
    max_events_per_thread: ConfigInt = Field(default=0, ge=0)
    # How long an event may wait to be written with the next ones (token
    # events come in bursts: one transaction per burst, not per token).
    flush_interval_ms: ConfigInt = Field(default=50, ge=0, le=1000)


class ChannelLayerConfig(_Section):
    """Django Channels layer: in-memory for one process, Redis for several."""

    type: Literal["memory", "redis"] = "memory"


class AuthConfig(_Section):
    """Local accounts created on the first start of the embedded server."""

    bootstrap_admin: bool = True
    admin_username: str = "admin"


class WebhooksConfig(_Section):
    """Run-completion webhooks (a run's ``webhook`` URL): who may be called, and how patiently."""

    # True lets webhooks reach loopback, private, link-local and reserved
    # addresses (a receiver on this machine or the LAN); false refuses them at
    # admission and again at send time, as the LangGraph Platform does.
    allow_private: bool = False
    # One delivery attempt, connect to last byte, at most this long.
    timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    # Attempts per webhook (a timeout, a connection error, 408, 429 or 5xx is retried).
    max_attempts: ConfigInt = Field(default=3, ge=1, le=10)
    # The pause before the second attempt; it doubles before each later one.
    backoff_seconds: float = Field(default=1.0, ge=0, le=300)


class RunsConfig(_Section):
    """Run defaults and where runs execute."""

    default_multitask_strategy: Literal["reject", "interrupt", "rollback", "enqueue"] = "reject"
    recursion_limit: ConfigInt = Field(default=100, ge=1)
    max_recursion_limit: ConfigInt = Field(default=1000, ge=1)
    # False: server processes only admit and stream; `manage.py run_workers` executes.
    execute_in_server: bool = True
    # Runs one process executes at once.
    capacity: ConfigInt = Field(default=32, ge=1)
    # How often an idle worker looks for pending runs admitted elsewhere (and fires due crons).
    poll_seconds: float = Field(default=1.0, gt=0)
    # A running run's lease; another host fails it as orphaned once expired.
    lease_seconds: ConfigInt = Field(default=30, ge=3)
    # DELETE of a thread cancels its runs, then waits this long for them to end (else 409).
    delete_cancel_wait_seconds: float = Field(default=10.0, gt=0, le=300)
    # The longest delayed start a run may ask for (``after_seconds``); more is a 422.
    max_after_seconds: ConfigInt = Field(default=86_400, ge=0, le=31_536_000)
    webhooks: WebhooksConfig = Field(default_factory=WebhooksConfig)


class ThreadsConfig(_Section):
    """Thread housekeeping."""

    # Expired threads (``ttl``) one worker deletes or prunes per poll; the
    # rest wait for the next poll (or another worker).
    ttl_sweep_limit: ConfigInt = Field(default=20, ge=1, le=10_000)


class LimitsConfig(_Section):
    """What one request may carry and one thread may hold (a bad value is a 4xx, never a 500)."""

    # Django's DATA_UPLOAD_MAX_MEMORY_SIZE: a bigger body is a 413.
    max_body_bytes: ConfigInt = Field(default=2_621_440, ge=1024, le=1_073_741_824)
    # JSON nesting a body may have; deeper is a 422 (Python's parser itself
    # fails near 1000 levels, and so would code walking the value after it).
    max_json_depth: ConfigInt = Field(default=64, ge=2, le=256)
    # Thread metadata (after a PATCH merge) and run metadata, as compact UTF-8 JSON.
    max_metadata_bytes: ConfigInt = Field(default=65_536, ge=256, le=16_777_216)
    # A thread search stops adding threads past this many bytes of JSON (at
    # least one is always listed) and pages on with X-Pagination-Next: a
    # search of 40 fat threads answered 98 MB and grew the server by 400 MB.
    max_response_bytes: ConfigInt = Field(default=8_388_608, ge=65_536, le=1_073_741_824)


# An origin as a browser sends it: scheme, host and an optional port; no path.
_ORIGIN = re.compile(r"^[a-z][a-z0-9+.-]*://[^/?#\s]+$", re.IGNORECASE)
# What the JS and Python SDKs send and read; the headers our routes answer with.
DEFAULT_CORS_HEADERS = ["accept", "authorization", "cache-control", "content-type", "last-event-id", "x-api-key"]
DEFAULT_CORS_EXPOSE = ["Content-Location", "Location", "X-Pagination-Total", "X-Pagination-Next"]


class CorsConfig(_Section):
    """Which browser origins may call ``/api/`` (langgraph.json's ``http.cors`` keys); off by default.

    Only the CORS headers: an allowed origin still needs an API key on every
    request (a browser sends it in ``x-api-key``, or ``?api_key=`` on a
    WebSocket). Cookies from another origin are never an identity.
    """

    # Exact origins ("https://app.example.com", "http://127.0.0.1:5173") or "*".
    allow_origins: list[str] = Field(default_factory=list)
    # An origin matching this regex (whole string) is allowed too.
    allow_origin_regex: str | None = None
    allow_methods: list[str] = Field(default_factory=lambda: ["GET", "POST", "PUT", "PATCH", "DELETE"])
    # Request headers a page may send; "*" allows whatever the preflight asks for.
    allow_headers: list[str] = Field(default_factory=lambda: list(DEFAULT_CORS_HEADERS))
    allow_credentials: bool = False
    # Response headers a page may read: the SDKs read run ids from Content-Location.
    expose_headers: list[str] = Field(default_factory=lambda: list(DEFAULT_CORS_EXPOSE))
    # How long a browser may cache a preflight answer, in seconds.
    max_age: ConfigInt = Field(default=600, ge=0, le=86400)

    @field_validator("allow_origins")
    @classmethod
    def _origins(cls, values: list[str]) -> list[str]:
        for value in values:
            if value != "*" and not _ORIGIN.match(value):
                raise ValueError(f"{value!r} is not an origin such as https://app.example.com (no path, no slash)")
        return [v if v == "*" else v.lower() for v in values]

    @field_validator("allow_origin_regex")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return value

    @field_validator("allow_methods")
    @classmethod
    def _methods(cls, values: list[str]) -> list[str]:
        return [v.upper() for v in values]

    @property
    def enabled(self) -> bool:
        """True when some origin may be allowed."""
        return bool(self.allow_origins or self.allow_origin_regex)

    def allows_origin(self, origin: str) -> bool:
        """Return whether a browser page on ``origin`` may read our answers."""
        if "*" in self.allow_origins or origin.lower() in self.allow_origins:
            return True
        return bool(self.allow_origin_regex and re.fullmatch(self.allow_origin_regex, origin))


def _graph_path(value: str) -> str:
    if problem := graph_path_problem(value):
        raise ValueError(problem)
    return value


GraphPath = Annotated[str, AfterValidator(_graph_path)]


class ContextConfig(_Section):
    """Context compaction (``POST /threads/{id}/compact``) and the windows token usage measures against."""

    # Off: /compact answers DeerFlow's 409 "Context compaction is disabled.".
    compaction_enabled: bool = True
    # "builtin" (deterministic, no LLM), "graph" (the served graph's
    # ``compact_context`` attribute), or a "package.module:callable".
    compactor: str = Field(default="builtin", pattern=r"^(builtin|graph|[A-Za-z_][\w.]*:[A-Za-z_]\w*)$")
    # Messages a compaction keeps when the request names no ``keep`` (DeerFlow's default).
    keep_messages: ConfigInt = Field(default=20, ge=0)
    # Model name -> context window in tokens; others get the default (None: no percentage).
    context_windows: dict[str, ConfigInt] = Field(default_factory=dict)
    default_context_window: ConfigInt | None = Field(default=None, ge=1)


class DeerflowConfig(_Section):
    """The whole configuration file."""

    # Compaction and context windows (threads.compaction, runs.selectors.thread_context_usage).
    context: ContextConfig = Field(default_factory=ContextConfig)

    database: DatabaseConfig = Field(default_factory=DatabaseConfig)
    redis: RedisConfig = Field(default_factory=RedisConfig)
    stream_bridge: StreamBridgeConfig = Field(default_factory=StreamBridgeConfig)
    channel_layer: ChannelLayerConfig = Field(default_factory=ChannelLayerConfig)
    thread_stream: ThreadStreamConfig = Field(default_factory=ThreadStreamConfig)
    run_events: RunEventsConfig = Field(default_factory=RunEventsConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    runs: RunsConfig = Field(default_factory=RunsConfig)
    threads: ThreadsConfig = Field(default_factory=ThreadsConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    # None: langgraph.json's http.cors if langgraph_json names one that has it, else off.
    cors: CorsConfig | None = None
    # Graphs to serve besides the built-in lead_agent (which an entry of the
    # same name replaces): id -> "./file.py:attr" or "package.module:attr",
    # paths relative to this file; langgraph.json's graphs, folder
    # dependencies and env are read from langgraph_json.
    graphs: dict[str, GraphPath] = Field(default_factory=dict)
    dependencies: list[str] = Field(default_factory=list)
    langgraph_json: str | None = None
    _source: Path = PrivateAttr(default=DEFAULT_CONFIG_PATH)

    def graph_sources(self) -> GraphSources:
        """Return the served graphs, resolved against the directory of this file."""
        return resolve_graph_sources(
            graphs=self.graphs,
            dependencies=self.dependencies,
            langgraph_json=self.langgraph_json,
            base=self._source.parent,
            source=self._source,
        )

    def cors_settings(self, sources: GraphSources) -> CorsConfig:
        """Return the CORS policy: ``cors:`` here, else langgraph.json's ``http.cors``, else off."""
        if self.cors is not None:
            return self.cors
        if sources.http_cors is None:
            return CorsConfig()
        try:
            return CorsConfig.model_validate(sources.http_cors)
        except ValidationError as exc:
            where = Path(sources.langgraph_json or "langgraph.json")
            raise ImproperlyConfigured(_format_error(where, exc, prefix="http.cors.", what="langgraph.json")) from None


def _format_error(path: Path, exc: ValidationError, *, prefix: str = "", what: str = "configuration") -> str:
    lines = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"])
        lines.append(f"{prefix}{key}: {err['msg']}")
    return f"Invalid {what} in {path}: " + "; ".join(lines)


# DeerFlow's deprecated sections for the checkpointer and the Store. There
# they may name another database than ``database:`` (its "split brain"); here
# one database holds everything, so they are read as ``database:`` or refused.
LEGACY_SECTIONS = ("checkpointer", "store")
WARN_LEGACY_SECTION = "%s: %s: is deprecated — use `database` instead. Read as database: %s; move it there."

# The ``config_version`` of DeerFlow's config.example.yaml whose keys this
# server follows (ours carries it too). An older DeerFlow file gets DeerFlow's
# warning, verbatim: ``make config-upgrade`` is DeerFlow's own tool.
CONFIG_VERSION = 34
WARN_OUTDATED = (
    "Your config.yaml (version %d) is outdated — the latest version is %d. "
    "Run `make config-upgrade` to merge new fields into your config."
)


class LegacyBackendConfig(_Section):
    """DeerFlow's deprecated ``checkpointer:`` (and ``store:``) section."""

    type: Literal["memory", "sqlite", "postgres"]
    connection_string: str | None = None
    postgres_schema: str = ""

    def as_database(self) -> dict[str, str]:
        """Return the ``database:`` keys that say the same."""
        if self.type == "postgres":
            return {"backend": "postgres", "postgres_url": self.connection_string or ""}
        return {"backend": self.type}


# The top-level keys of DeerFlow's own config.yaml (its ``AppConfig``) that are
# not ours: a DeerFlow file loads here unchanged, these sections unread.
DEERFLOW_TOP_LEVEL_KEYS = frozenset(
    {
        "config_version", "log_level", "logging", "token_usage", "token_budget", "max_recursion_limit",
        "models", "sandbox", "tools", "tool_groups", "skills", "skill_scan", "skill_evolution", "extensions",
        "tool_output", "tool_search", "title", "summarization", "memory", "agents_api", "acp_agents",
        "subagents", "guardrails", "authorization", "input_polish", "suggestions", "circuit_breaker",
        "llm_call", "channel_connections", "loop_detection", "tool_progress", "read_before_write",
        "safety_finish_reason", "agent_storage", "scheduler", "mcp_tasks", "run_ownership",
        "dedupe_storage",
    }
)  # fmt: skip
# Sections DeerFlow defines too, with keys of its own we do not read: an
# unknown key there is a warning (DeerFlow ignores unknown keys), not an error.
SHARED_WITH_DEERFLOW = frozenset({"database", "stream_bridge", "auth", "run_events"})
# Keys read before validation: refused or migrated with their own message.
KNOWN_OUTSIDE_THE_MODELS = frozenset({*LEGACY_SECTIONS, f"database.{LEGACY_SNAPSHOT_KEY}"})


def _section_model(annotation: Any) -> type[BaseModel] | None:
    """Return the pydantic model a field holds (``X`` or ``X | None``), else None."""
    candidates = getattr(annotation, "__args__", None) or (annotation,)
    for candidate in candidates:
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _unknown_key_problems(raw: dict, model: type[BaseModel], path: str) -> tuple[list[str], list[str]]:
    """Walk ``raw`` against ``model``'s fields; return (errors, warnings) naming unknown keys.

    A misspelt key used to pass silently (``cros:``, ``cors.allow_origin``):
    the setting fell back to its default and nobody was told. Each unknown
    key is named with the closest valid one.
    """
    errors: list[str] = []
    warnings: list[str] = []
    fields = model.model_fields
    for key, value in raw.items():
        where = f"{path}{key}"
        if key not in fields:
            if where in KNOWN_OUTSIDE_THE_MODELS or (not path and key in DEERFLOW_TOP_LEVEL_KEYS):
                continue
            section = path.split(".", 1)[0]
            problem = f"unknown key {where}" + _closest(str(key), fields, path)
            (warnings if section in SHARED_WITH_DEERFLOW else errors).append(problem)
            continue
        nested = _section_model(fields[key].annotation)
        if nested is not None and isinstance(value, dict):
            more_errors, more_warnings = _unknown_key_problems(value, nested, f"{where}.")
            errors += more_errors
            warnings += more_warnings
    return errors, warnings


def _closest(key: str, valid: Any, path: str) -> str:
    match = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.6)
    if match:
        return f" (did you mean {path}{match[0]}?)"
    return f" (valid keys here: {', '.join(sorted(valid))})"


def _warn_if_outdated(raw: dict) -> None:
    """Say what DeerFlow says of an old ``config_version``; a file without one was written for this server."""
    if "config_version" not in raw:
        return
    try:
        version = int(raw["config_version"])
    except (TypeError, ValueError):
        version = 0
    if version < CONFIG_VERSION:
        logger.warning(WARN_OUTDATED, version, CONFIG_VERSION)


def _resolve_env(value: Any, where: str) -> Any:
    """Replace each ``$VAR`` or ``${VAR}`` value with the variable, as DeerFlow does: whole values only."""
    if isinstance(value, dict):
        return {key: _resolve_env(item, f"{where}.{key}" if where else str(key)) for key, item in value.items()}
    if isinstance(value, list):
        return [_resolve_env(item, f"{where}[{index}]") for index, item in enumerate(value)]
    if not isinstance(value, str) or not value.startswith("$"):
        return value
    name = value[1:]
    if name.startswith("{") and name.endswith("}"):
        name = name[1:-1]
    resolved = os.environ.get(name)
    if resolved is None:
        raise ValueError(f"{where}: Environment variable {name} not found for config value {value}")
    return resolved


def _read_sections(raw: dict) -> dict:
    """Resolve environment variables in the sections this server reads; DeerFlow's others stay unread.

    A DeerFlow file's ``models:`` may name ``$OPENAI_API_KEY``: a variable
    this server never needs must not stop it.
    """
    read = {*DeerflowConfig.model_fields, *LEGACY_SECTIONS}
    return {key: _resolve_env(value, str(key)) if key in read else value for key, value in raw.items()}


def _legacy_database(raw: dict, source: Path) -> dict | None:
    """Return the ``database:`` keys that ``checkpointer:``/``store:`` say, or None without them."""
    said: dict[str, str] | None = None
    for section in LEGACY_SECTIONS:
        if section not in raw:
            continue
        try:
            legacy = LegacyBackendConfig.model_validate(raw[section])
        except ValidationError as exc:
            raise ImproperlyConfigured(_format_error(source, exc, prefix=f"{section}.")) from None
        keys = legacy.as_database()
        if keys.get("postgres_url") == "":
            raise ImproperlyConfigured(
                f"Invalid configuration in {source}: {section}.connection_string: a postgres {section} needs one; "
                "better, write database: backend: postgres with postgres_url"
            )
        if said is not None and keys != said:
            raise ImproperlyConfigured(
                f"Invalid configuration in {source}: checkpointer: and store: name different databases, but the "
                "checkpoints and the Store share one here; write one database: section instead"
            )
        said = keys
        logger.warning(WARN_LEGACY_SECTION, source, section, _describe(keys))
        if legacy.type == "sqlite" and legacy.connection_string:
            logger.warning(
                "%s: %s.connection_string %s is not used: the one SQLite file is deerflow.db in database.sqlite_dir",
                source,
                section,
                legacy.connection_string,
            )
        if legacy.postgres_schema:
            logger.warning(
                "%s: %s.postgres_schema is ignored: tables go to the connection's search_path", source, section
            )
    return said


def _describe(keys: dict[str, str]) -> str:
    return ", ".join(f"{key}: {value}" for key, value in keys.items())


def _map_legacy_sections(raw: dict, source: Path) -> dict:
    """Read DeerFlow's deprecated ``checkpointer:``/``store:`` onto ``database:``; refuse a second database.

    DeerFlow keeps checkpoints and the Store where the legacy section says and
    everything else in ``database:``. Here they share one database, so a
    legacy section that names another one than ``database:`` cannot mean
    anything: one line says what to write instead.
    """
    said = _legacy_database(raw, source)
    raw = {key: value for key, value in raw.items() if key not in LEGACY_SECTIONS}
    if said is None:
        return raw
    database = raw.get("database") or {}
    if not isinstance(database, dict):
        return raw  # the model names the bad section
    explicit = {key: database[key] for key in said if key in database}
    if any(said[key] != value for key, value in explicit.items()):
        raise ImproperlyConfigured(
            f"Invalid configuration in {source}: checkpointer:/store: ({_describe(said)}) name another database "
            f"than database: ({_describe(explicit)}); checkpoints and the Store live with threads and runs in "
            "database: here: delete the checkpointer:/store: section, or move its backend under database:"
        )
    return {**raw, "database": {**database, **said}}


def parse_config(raw: Any, *, source: Path) -> DeerflowConfig:
    """Validate an already-parsed YAML document; raise ImproperlyConfigured naming the key."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ImproperlyConfigured(f"Invalid configuration in {source}: the top level must be a mapping")
    _warn_if_outdated(raw)
    try:
        raw = _read_sections(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"Invalid configuration in {source}: {exc}") from None
    raw = _map_legacy_sections(raw, source)
    errors, warnings = _unknown_key_problems(raw, DeerflowConfig, "")
    for warning in warnings:
        logger.warning("%s: %s; it is ignored", source, warning)
    if errors:
        raise ImproperlyConfigured(f"Invalid configuration in {source}: " + "; ".join(errors))
    try:
        config = DeerflowConfig.model_validate(raw)
    except ValidationError as exc:
        raise ImproperlyConfigured(_format_error(source, exc)) from None
    config._source = source.resolve()
    return config


def load_config() -> DeerflowConfig:
    """Read the file named by ``DEERFLOW_CONFIG`` (or the default) and validate it."""
    named = os.environ.get(CONFIG_ENV)
    path = Path(named) if named else DEFAULT_CONFIG_PATH
    if not path.exists():
        if named:
            raise ImproperlyConfigured(f"{CONFIG_ENV} names {path}, which does not exist")
        return DeerflowConfig()
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ImproperlyConfigured(f"Invalid YAML in {path}: {exc}") from None
    return parse_config(raw, source=path)
