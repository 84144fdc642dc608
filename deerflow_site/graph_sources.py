"""Where the served graphs come from: the built-in agent, ``langgraph.json`` and ``graphs:``.

``config.yaml`` may name graphs itself (``graphs:``, ``dependencies:``) and
read an existing ``langgraph.json`` (``langgraph_json:``), so a project that
runs under ``langgraph dev`` runs here unchanged. Paths are relative to the
file that names them. A graph path is langgraph.json's syntax:
``./path/to/file.py:attr`` or ``package.module:attr``. What is wrong with the
*files* (a missing langgraph.json, a malformed path) stops start-up here;
what is wrong with the *graphs* (an import error) is reported by the system
check and at serve time, and never blocks ``migrate``.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from checkpoints.store_index import StoreIndex, load_embeddings
from core import custom_encryption
from core.module_files import module_of_spec, project_setup
from deerflow_site import custom_auth, langgraph_keys

logger = logging.getLogger(__name__)

BUILTIN_GRAPHS = {"lead_agent": "runs.demo_agent:graph"}
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_ATTR = re.compile(r"^[A-Za-z_]\w*$")
_ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")


@dataclass(frozen=True)
class GraphSources:
    """The resolved registry: graph id → import spec, folders for sys.path, env for the graphs.

    ``http_cors`` is langgraph.json's ``http.cors`` as written (validated by
    the configuration, which decides whether it applies), ``langgraph_json``
    the file it came from, ``not_applicable`` its build settings and
    package requirements (accepted; the start-up banner lists them once),
    ``auth`` its custom auth, loaded and checked (None: API keys and
    sessions), ``http_app`` its ``http.app`` import spec (loaded by the ASGI
    app: ``deerflow_site.custom_app``) and ``http_app_auth`` its
    ``http.enable_custom_route_auth``.
    """

    graphs: dict[str, str]
    dependencies: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    http_cors: dict[str, Any] | None = None
    langgraph_json: str | None = None
    not_applicable: list[str] = field(default_factory=list)
    auth: custom_auth.CustomAuth | None = None
    # langgraph.json's encryption.path, loaded (core.custom_encryption); None: no custom handlers.
    encryption: custom_encryption.CustomEncryption | None = None
    http_app: str | None = None
    http_app_auth: bool = False
    # http.middleware_order: "middleware_first" (the default) or "auth_first".
    middleware_order: str = "middleware_first"
    # checkpointer.ttl as threads.ttl reads it: {"ttl": minutes, "strategy": "delete" | "keep_latest"}.
    thread_ttl: dict[str, Any] | None = None
    # store.ttl.default_ttl: minutes an item written without its own TTL lives.
    store_ttl: float | None = None
    # store.index: the Store's embedding index, its function loaded (checkpoints.store_index).
    store_index: StoreIndex | None = None
    # http.disable_*: the route families not served ("assistants", "runs", "threads", "store", "meta", "webhooks",
    # "mcp", "a2a").
    http_disabled: frozenset[str] = frozenset()
    # http.configurable_headers: request headers copied into a run's configurable ({"includes": [...], ...}).
    configurable_headers: dict[str, list[str]] | None = None
    # http.logging_headers: request headers the access log line records (same shape).
    logging_headers: dict[str, list[str]] | None = None
    # http.mount_prefix: the API is served under this path too ("/my-deployment/threads" is "/api/threads").
    mount_prefix: str | None = None


def graph_path_problem(value: Any) -> str | None:
    """Return why ``value`` is not ``./file.py:attr`` or ``package.module:attr``, else None."""
    if not isinstance(value, str) or value.count(":") != 1:
        return "must be './path/to/file.py:attr' or 'package.module:attr'"
    target, attr = value.split(":")
    if not _ATTR.match(attr):
        return f"{attr!r} is not a Python name"
    if not _is_file(target) and not _MODULE.match(target):
        return f"{target!r} is neither a .py file path nor a dotted module name"
    return None


def _is_file(target: str) -> bool:
    return target.endswith(".py") or target.startswith((".", "/"))


def _resolve_graph(value: str, base: Path) -> str:
    """Return the spec with a file path made absolute against ``base``."""
    target, attr = value.split(":")
    if not _is_file(target):
        return value
    return f"{(base / target).resolve()}:{attr}"


def _is_folder_dependency(value: str) -> bool:
    # langgraph.json mixes local folders ("./src") with pip requirements
    # ("langchain_openai"); only the folders concern the import path.
    return value.startswith((".", "/"))


def parse_env_file(path: Path) -> dict[str, str]:
    """Read a ``.env`` file: ``KEY=value`` lines, ``export`` allowed, quotes stripped, ``#`` comments."""
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _ENV_LINE.match(line)
        if match is None:
            continue
        key, value = match.groups()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        env[key] = value
    return env


def _read_langgraph_json(path: Path, *, source: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ImproperlyConfigured(f"Invalid configuration in {source}: langgraph_json: {path} does not exist")
    try:
        data = json.loads(path.read_text())
    except (ValueError, OSError) as exc:
        raise ImproperlyConfigured(f"Invalid langgraph.json {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ImproperlyConfigured(f"Invalid langgraph.json {path}: the top level must be an object")
    return data


def _graphs_of(raw: Any, *, where: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ImproperlyConfigured(f"{where}: graphs must map graph ids to paths")
    graphs = {}
    for graph_id, value in raw.items():
        # langgraph.json also allows {"path": ..., "description": ...} objects.
        path = value.get("path") if isinstance(value, dict) else value
        if problem := graph_path_problem(path):
            raise ImproperlyConfigured(f"{where}: graphs.{graph_id}: {problem}")
        graphs[str(graph_id)] = str(path)  # a string: graph_path_problem refuses anything else
    return graphs


def _env_of(raw: Any, *, base: Path, where: str) -> dict[str, str]:
    if raw in (None, {}):
        return {}
    if isinstance(raw, dict):
        return {str(k): str(v) for k, v in raw.items()}
    if isinstance(raw, str):
        path = base / raw
        if not path.is_file():
            raise ImproperlyConfigured(f"{where}: env: {path} does not exist")
        return parse_env_file(path)
    raise ImproperlyConfigured(f"{where}: env must be an object or the path of a .env file")


def _http_cors_of(raw: Any, *, where: str) -> dict[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ImproperlyConfigured(f"{where}: http must be an object")
    cors = raw.get("cors")
    if cors is not None and not isinstance(cors, dict):
        raise ImproperlyConfigured(f"{where}: http.cors must be an object")
    return cors


def _http_app_of(raw: Any, *, base: Path, where: str) -> tuple[str | None, bool]:
    """Return ``http.app`` as an import spec (its file checked now; imported by the ASGI app) and its auth flag."""
    if not isinstance(raw, dict) or raw.get("app") is None:
        return None, False
    if problem := graph_path_problem(raw["app"]):
        raise ImproperlyConfigured(f"{where}: http.app: {problem}")
    target, _, _ = raw["app"].partition(":")
    if _is_file(target) and not (base / target).is_file():
        raise ImproperlyConfigured(f"{where}: http.app: {(base / target).resolve()} does not exist")
    enabled = raw.get("enable_custom_route_auth", False)
    if not isinstance(enabled, bool):
        raise ImproperlyConfigured(f"{where}: http.enable_custom_route_auth must be true or false")
    return _resolve_graph(raw["app"], base), enabled


def _middleware_order_of(raw: Any, *, where: str) -> str:
    """``http.middleware_order``: ``middleware_first`` (the default) or ``auth_first``."""
    order = raw.get("middleware_order") if isinstance(raw, dict) else None
    if order is None:
        return "middleware_first"
    if order not in ("middleware_first", "auth_first"):
        raise ImproperlyConfigured(f"{where}: http.middleware_order must be middleware_first or auth_first")
    return order


def _thread_ttl_of(raw: Any, *, where: str) -> dict[str, Any] | None:
    """Return ``checkpointer.ttl`` (``default_ttl`` minutes, ``strategy``) as a thread ``ttl`` object, or None.

    Checked here in its shape; ``threads.ttl`` (loaded after the apps, so not
    imported while settings load) reads it with the rules a client's ``ttl`` meets.
    """
    ttl = raw.get("ttl") if isinstance(raw, dict) else None
    if ttl is None or (isinstance(ttl, dict) and ttl.get("default_ttl") is None):
        return None
    minutes, strategy = (ttl.get("default_ttl"), ttl.get("strategy") or "delete") if isinstance(ttl, dict) else (0, "")
    if isinstance(minutes, bool) or not isinstance(minutes, int | float) or minutes <= 0:
        raise ImproperlyConfigured(f"{where}: checkpointer.ttl.default_ttl must be a positive number of minutes")
    if strategy not in ("delete", "keep_latest"):
        raise ImproperlyConfigured(f"{where}: checkpointer.ttl.strategy must be delete or keep_latest")
    return {"ttl": minutes, "strategy": strategy}


DISABLE_FAMILIES = ("assistants", "runs", "threads", "store", "meta", "webhooks", "mcp", "a2a")


def _http_disabled_of(raw: Any, *, where: str) -> frozenset[str]:
    """Return the families ``http.disable_<family>: true`` removes."""
    if not isinstance(raw, dict):
        return frozenset()
    disabled = set()
    for family in DISABLE_FAMILIES:
        value = raw.get(f"disable_{family}", False)
        if not isinstance(value, bool):
            raise ImproperlyConfigured(f"{where}: http.disable_{family} must be true or false")
        if value:
            disabled.add(family)
    return frozenset(disabled)


def _header_rules_of(raw: Any, key: str, *, where: str) -> dict[str, list[str]] | None:
    """Return ``http.<key>`` (``includes``/``excludes`` header patterns, ``*`` wildcards), or None.

    ``configurable_headers`` and ``logging_headers`` share the shape.
    """
    headers = raw.get(key) if isinstance(raw, dict) else None
    if headers is None:
        return None
    if not isinstance(headers, dict) or not set(headers) <= {"includes", "excludes"}:
        raise ImproperlyConfigured(f"{where}: http.{key} must be an object with includes and excludes")
    lists = {name: headers.get(name) or [] for name in ("includes", "excludes")}
    if not all(isinstance(v, list) and all(isinstance(p, str) for p in v) for v in lists.values()):
        raise ImproperlyConfigured(f"{where}: http.{key} includes and excludes must be lists of names")
    return {name: [pattern.lower() for pattern in value] for name, value in lists.items()}


# Paths of this server a mount prefix may not shadow.
_OWN_PREFIXES = ("/api", "/admin", "/console", "/static", "/ws")


def _mount_prefix_of(raw: Any, *, where: str) -> str | None:
    """Return ``http.mount_prefix`` (``/name``: the API is served under it too), or None."""
    prefix = raw.get("mount_prefix") if isinstance(raw, dict) else None
    if prefix is None or prefix == "":
        return None
    if not isinstance(prefix, str) or not re.fullmatch(r"(/[A-Za-z0-9._~-]+)+", prefix):
        raise ImproperlyConfigured(
            f"{where}: http.mount_prefix must be a path like '/my-deployment' (starting with '/', "
            f"not ending with one), got {prefix!r}"
        )
    if any(prefix == own or prefix.startswith(own + "/") for own in _OWN_PREFIXES):
        raise ImproperlyConfigured(
            f"{where}: http.mount_prefix {prefix!r} would shadow this server's own {prefix} routes"
        )
    return prefix


def _store_ttl_of(raw: Any, *, where: str) -> float | None:
    """Return ``store.ttl.default_ttl`` in minutes, or None; ``refresh_on_read`` is refused, reads never refresh."""
    ttl = raw.get("ttl") if isinstance(raw, dict) else None
    if not isinstance(ttl, dict):
        if ttl is not None:
            raise ImproperlyConfigured(f"{where}: store.ttl must be an object")
        return None
    if ttl.get("refresh_on_read"):
        logger.warning(
            "%s: store.ttl.refresh_on_read: not applied: reads never extend an item's TTL here "
            "(a TTL counts from the item's last write)",
            where,
        )
    minutes = ttl.get("default_ttl")
    if minutes is None:
        return None
    if isinstance(minutes, bool) or not isinstance(minutes, int | float) or minutes <= 0:
        raise ImproperlyConfigured(f"{where}: store.ttl.default_ttl must be a positive number of minutes")
    return float(minutes)


def _store_index_of(raw: Any, *, base: Path, where: str, folders: list[str], env: dict[str, str]):
    """Load ``store.index`` (``dims``, ``embed``, ``fields``) with its embedding function, or None.

    Loaded at start-up as the auth is: a bad path, a provider whose package
    or key is missing, or a function that fails stops the server with one
    line, instead of a Store that fails on its first put.
    """
    index = raw.get("index") if isinstance(raw, dict) else None
    if index is None:
        return None
    if not isinstance(index, dict):
        raise ImproperlyConfigured(f"{where}: store.index must be an object with dims, embed and fields")
    if unknown := sorted(set(index) - {"dims", "embed", "fields"}):
        raise ImproperlyConfigured(f"{where}: store.index: unknown keys {', '.join(unknown)} (dims, embed, fields)")
    dims, embed, fields = index.get("dims"), index.get("embed"), index.get("fields", ["$"])
    if isinstance(dims, bool) or not isinstance(dims, int) or dims <= 0:
        raise ImproperlyConfigured(f"{where}: store.index.dims must be a positive integer, got {dims!r}")
    if not isinstance(embed, str) or ":" not in embed:
        raise ImproperlyConfigured(
            f"{where}: store.index.embed must be './file.py:function', 'package.module:function' "
            f"or a LangChain 'provider:model', got {embed!r}"
        )
    if isinstance(fields, str):
        fields = [fields]
    if not isinstance(fields, list) or not fields or not all(isinstance(f, str) and f for f in fields):
        raise ImproperlyConfigured(f"{where}: store.index.fields must be a non-empty list of value paths")
    project_setup(folders, env)
    target = embed.rpartition(":")[0]
    spec = _resolve_graph(embed, base) if _is_file(target) else embed
    try:
        embeddings = load_embeddings(spec, load_function=_load_attribute)
    except (ValueError, ImportError, AttributeError) as exc:
        raise ImproperlyConfigured(f"{where}: store.index.embed: {exc}") from None
    return StoreIndex(dims=dims, embed=embed, fields=fields, embeddings=embeddings)


def _load_attribute(spec: str) -> Any:
    """Import ``/abs/file.py:attr`` or ``package.module:attr`` and return the attribute (one-line errors)."""
    target = spec.rpartition(":")[0]
    if _is_file(target) and not Path(target).is_file():
        raise ValueError(f"{target} does not exist")
    try:
        module, attr = module_of_spec(spec, prefix="deerflow_embed")
    except Exception as exc:  # any import failure is a start-up error naming the path
        raise ValueError(f"{spec} cannot be imported: {type(exc).__name__}: {exc}") from exc
    if not hasattr(module, attr):
        raise ValueError(f"{spec}: the module has no {attr!r}")
    return getattr(module, attr)


def _path_spec(raw: Any, section: str, *, base: Path, where: str) -> str | None:
    """The import spec of ``<section>.path`` (files made absolute), checked; None when the section names none."""
    if raw is None or (isinstance(raw, dict) and raw.get("path") is None):
        return None
    if not isinstance(raw, dict):
        raise ImproperlyConfigured(f"{where}: {section} must be an object")
    if problem := graph_path_problem(raw["path"]):
        raise ImproperlyConfigured(f"{where}: {section}.path: {problem}")
    target, _, _ = raw["path"].partition(":")
    if _is_file(target) and not (base / target).is_file():
        raise ImproperlyConfigured(f"{where}: {section}.path: {(base / target).resolve()} does not exist")
    return _resolve_graph(raw["path"], base)


def _auth_of(raw: Any, *, base: Path, where: str, folders: list[str], env: dict[str, str]):
    """Load langgraph.json's ``auth.path`` (its folders and env in place first); None without one.

    Loaded at start-up, not on a first request: a bad path or a handler this
    server would not apply stops the server instead of serving without it.
    """
    if (spec := _path_spec(raw, "auth", base=base, where=where)) is None:
        return None
    cache = custom_auth.cache_from(raw.get("cache"), where=where)
    openapi = custom_auth.openapi_from(raw.get("openapi"), where=where)
    try:
        return custom_auth.load(spec, cache=cache, folders=folders, env=env, openapi=openapi)
    except ImproperlyConfigured as exc:
        raise ImproperlyConfigured(f"{where}: {exc}") from None


def _encryption_of(raw: Any, *, base: Path, where: str, folders: list[str], env: dict[str, str]):
    """Load langgraph.json's ``encryption.path`` at start-up (a bad path stops the server); None without one."""
    if (spec := _path_spec(raw, "encryption", base=base, where=where)) is None:
        return None
    try:
        return custom_encryption.load(spec, folders=folders, env=env)
    except ImproperlyConfigured as exc:
        raise ImproperlyConfigured(f"{where}: {exc}") from None


def resolve_graph_sources(
    *, graphs: dict[str, str], dependencies: list[str], langgraph_json: str | None, base: Path, source: Path
) -> GraphSources:
    """Merge the built-in graph, langgraph.json and ``graphs:`` (later wins) into one registry."""
    registry = dict(BUILTIN_GRAPHS)
    folders: list[str] = []
    env: dict[str, str] = {}
    http_cors: dict[str, Any] | None = None
    auth: custom_auth.CustomAuth | None = None
    http_app: str | None = None
    http_app_auth = False
    middleware_order = "middleware_first"
    encryption = None
    thread_ttl: dict[str, Any] | None = None
    store_ttl: float | None = None
    store_index: StoreIndex | None = None
    http_disabled: frozenset[str] = frozenset()
    configurable_headers: dict[str, list[str]] | None = None
    logging_headers: dict[str, list[str]] | None = None
    mount_prefix: str | None = None
    path: Path | None = None
    not_applicable: list[str] = []
    if langgraph_json:
        path = (base / langgraph_json).resolve()
        data = _read_langgraph_json(path, source=source)
        where = f"Invalid langgraph.json {path}"
        keys = langgraph_keys.account(data)
        if keys.refusals:
            raise ImproperlyConfigured(f"{where}: " + "; ".join(keys.refusals))
        for warning in keys.warnings:
            logger.warning("langgraph.json %s: %s", path, warning)
        registry.update(
            {gid: _resolve_graph(p, path.parent) for gid, p in _graphs_of(data.get("graphs"), where=where).items()}
        )
        deps = data.get("dependencies") or []
        if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
            raise ImproperlyConfigured(f"{where}: dependencies must be a list of strings")
        folders += [str((path.parent / d).resolve()) for d in deps if _is_folder_dependency(d)]
        not_applicable = keys.build + [f"dependencies: {d}" for d in deps if not _is_folder_dependency(d)]
        env = _env_of(data.get("env"), base=path.parent, where=where)
        http_cors = _http_cors_of(data.get("http"), where=where)
        auth = _auth_of(data.get("auth"), base=path.parent, where=where, folders=folders, env=env)
        encryption = _encryption_of(data.get("encryption"), base=path.parent, where=where, folders=folders, env=env)
        http_app, http_app_auth = _http_app_of(data.get("http"), base=path.parent, where=where)
        middleware_order = _middleware_order_of(data.get("http"), where=where)
        thread_ttl = _thread_ttl_of(data.get("checkpointer"), where=where)
        store_ttl = _store_ttl_of(data.get("store"), where=where)
        store_index = _store_index_of(data.get("store"), base=path.parent, where=where, folders=folders, env=env)
        http_disabled = _http_disabled_of(data.get("http"), where=where)
        configurable_headers = _header_rules_of(data.get("http"), "configurable_headers", where=where)
        logging_headers = _header_rules_of(data.get("http"), "logging_headers", where=where)
        mount_prefix = _mount_prefix_of(data.get("http"), where=where)
        if encryption is not None and encryption.seals_json and store_index is not None:
            logger.warning(
                "langgraph.json %s: encryption.path: Store values are not sealed: store.index embeds the values "
                "it stores, and would embed ciphertext (docs/operations.md#custom-encryption-handlers)",
                path,
            )
    registry.update({gid: _resolve_graph(p, base) for gid, p in graphs.items()})
    folders += [str((base / d).resolve()) for d in dependencies]
    return GraphSources(
        graphs=registry,
        dependencies=list(dict.fromkeys(folders)),
        env=env,
        http_cors=http_cors,
        langgraph_json=str(path) if path else None,
        not_applicable=not_applicable,
        auth=auth,
        encryption=encryption,
        http_app=http_app,
        http_app_auth=http_app_auth,
        middleware_order=middleware_order,
        thread_ttl=thread_ttl,
        store_ttl=store_ttl,
        store_index=store_index,
        http_disabled=http_disabled,
        configurable_headers=configurable_headers,
        logging_headers=logging_headers,
        mount_prefix=mount_prefix,
    )
