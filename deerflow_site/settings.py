"""Django settings: one module, driven by the YAML config and a few env vars.

Environment:
- ``DEERFLOW_CONFIG``: path of the YAML file (default ``config.yaml`` at the root).
- ``DATABASE_URL``: a ``postgresql://`` URL; selects PostgreSQL for all five stores.
- ``REDIS_URL``: overrides ``redis.url`` from the file.
- ``DJANGO_SECRET_KEY``, ``DJANGO_DEBUG``, ``DJANGO_ALLOWED_HOSTS``.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from checkpoints.encryption import KeyringError, json_keys_from, keyring_from
from deerflow_site.config import BASE_DIR, load_config
from deerflow_site.databases import database_settings

DEERFLOW_CONFIG = load_config()

VAR_DIR = Path(os.environ.get("DEERFLOW_VAR_DIR", BASE_DIR / "var"))


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off", ""}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {value!r}")


def _secret_key() -> str:
    """Return the secret key: env first, else one generated once and kept under var/."""
    if key := os.environ.get("DJANGO_SECRET_KEY"):
        return key
    path = VAR_DIR / "secret_key"
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(50)
    path.write_text(key)
    path.chmod(0o600)
    return key


SECRET_KEY = _secret_key()
DEBUG = _env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1],testserver").split(",")

INSTALLED_APPS = [
    "core.admin_site.ConsoleAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "deerflow_site.apps.SiteConfig",
    "checkpoints.apps.CheckpointsConfig",
    "store.apps.StoreConfig",
    "threads.apps.ThreadsConfig",
    "runs.apps.RunsConfig",
    "console.apps.ConsoleConfig",
]

# Django's own middleware, its hooks called on the event loop instead of a
# thread hop each (deerflow_site/middleware.py says which may still hop).
MIDDLEWARE = [
    "deerflow_site.middleware.SecurityMiddleware",
    # Before anything that could answer first: a preflight carries no API key.
    "deerflow_site.cors.CorsMiddleware",
    "deerflow_site.middleware.SessionMiddleware",
    "deerflow_site.middleware.CommonMiddleware",
    "deerflow_site.middleware.CsrfViewMiddleware",
    "deerflow_site.middleware.AuthenticationMiddleware",
    # Only with langgraph.json's encryption.path: the request's X-Encryption-Context (core.custom_encryption).
    "deerflow_site.middleware.EncryptionContextMiddleware",
    "deerflow_site.middleware.MessageMiddleware",
    "deerflow_site.middleware.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "deerflow_site.urls"
ASGI_APPLICATION = "deerflow_site.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": database_settings(DEERFLOW_CONFIG.database)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if DEERFLOW_CONFIG.channel_layer.type == "redis":
    from channels_redis.core import RedisChannelLayer

    from core.redis import blocking_timeout, connection_kwargs

    # Every receive is a BZPOPMIN of brpop_timeout (5 s): with redis-py's
    # default 5 s socket timeout the read itself timed out and killed the
    # receiver, so the socket waits the block time plus a margin.
    _CHANNELS_REDIS = connection_kwargs("channels", socket_timeout=blocking_timeout(RedisChannelLayer.brpop_timeout))
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [{"address": DEERFLOW_CONFIG.redis.resolved_url(), **_CHANNELS_REDIS}]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# A bigger request body is answered 413 {"detail": ...} (core.drf).
DATA_UPLOAD_MAX_MEMORY_SIZE = DEERFLOW_CONFIG.limits.max_body_bytes

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "deerflow_site.auth.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # StorableURLText: 422 for path ids and query strings no backend can store.
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "core.drf.StorableURLText",
    ],
    # JSON with bounded depth, finite numbers and only text every backend can store.
    "DEFAULT_PARSER_CLASSES": [
        "core.drf.JSONParser",
        # LangGraph Studio posts JSON bodies as text/plain.
        "core.drf.PlainTextJSONParser",
    ],
    "DEFAULT_RENDERER_CLASSES": ["core.renderers.FastJSONRenderer"],
    "EXCEPTION_HANDLER": "core.drf.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "deerflow_site.schema.ConventionSchema",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "DeerFlow persistence gateway",
    "DESCRIPTION": "LangGraph Platform compatible thread, state, run and store API.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SCHEMA_PATH_PREFIX": "/api",
    # One name for one choice set used by several fields (runs' on_completion, crons' on_run_completed).
    "ENUM_NAME_OVERRIDES": {"OnCompletionEnum": ["delete", "keep"]},
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "deerflow_site.schema.apply_auth_openapi",
        "deerflow_site.schema.add_error_responses",
    ],
}

# Graphs served as assistants, by import spec (langgraph.json's syntax, file
# paths made absolute): the built-in lead_agent plus config.yaml's graphs:
# and langgraph_json: (checkpoints.graphs loads, adapts and checks them).
_GRAPH_SOURCES = DEERFLOW_CONFIG.graph_sources()
# LANGGRAPH_AES_KEY (and its fallbacks), from the environment or langgraph.json's env: checkpoints sealed at rest.
# LANGGRAPH_AES_JSON_KEYS: chosen JSON keys sealed with that key (core.aes_json), where no encryption.path is.
try:
    _CHECKPOINT_KEYRING = keyring_from({**_GRAPH_SOURCES.env, **os.environ})
    _JSON_KEYS = json_keys_from(
        {**_GRAPH_SOURCES.env, **os.environ},
        _CHECKPOINT_KEYRING,
        handlers=_GRAPH_SOURCES.encryption,
        index_fields=_GRAPH_SOURCES.store_index.fields if _GRAPH_SOURCES.store_index else None,
    )
except KeyringError as exc:
    raise ImproperlyConfigured(str(exc)) from None
DEERFLOW: dict[str, Any] = {
    "GRAPHS": _GRAPH_SOURCES.graphs,
    "GRAPH_DEPENDENCIES": _GRAPH_SOURCES.dependencies,
    "GRAPH_ENV": _GRAPH_SOURCES.env,
    # The langgraph.json served, and its keys that mean nothing here (the banner lists them).
    "LANGGRAPH_JSON": _GRAPH_SOURCES.langgraph_json,
    "LANGGRAPH_NOT_APPLICABLE": _GRAPH_SOURCES.not_applicable,
    # Browser origins allowed on /api/ (deerflow_site.cors): cors:, else langgraph.json's http.cors.
    "CORS": DEERFLOW_CONFIG.cors_settings(_GRAPH_SOURCES),
    # langgraph.json's custom auth, loaded (deerflow_site.custom_auth); None: API keys and sessions.
    "AUTH": _GRAPH_SOURCES.auth,
    # langgraph.json's http.app (an import spec) and http.enable_custom_route_auth (deerflow_site.custom_app).
    "HTTP_APP": _GRAPH_SOURCES.http_app,
    "HTTP_APP_AUTH": _GRAPH_SOURCES.http_app_auth,
    # langgraph.json's http.middleware_order: the http.app's middleware before or after authentication.
    "HTTP_MIDDLEWARE_ORDER": _GRAPH_SOURCES.middleware_order,
    # langgraph.json's checkpointer.ttl: the TTL of a thread created without its own (threads.ttl).
    "DEFAULT_THREAD_TTL": _GRAPH_SOURCES.thread_ttl,
    # langgraph.json's store.ttl.default_ttl: minutes a Store item written without its own ttl lives.
    "STORE_DEFAULT_TTL": _GRAPH_SOURCES.store_ttl,
    # langgraph.json's store.index: the Store's embedding index (checkpoints.store_index.StoreIndex), or None.
    "STORE_INDEX": _GRAPH_SOURCES.store_index,
    # langgraph.json's encryption.path: custom handlers for JSON fields and checkpoint blobs
    # (core.custom_encryption), or LANGGRAPH_AES_JSON_KEYS: chosen JSON keys sealed with LANGGRAPH_AES_KEY.
    "ENCRYPTION": _GRAPH_SOURCES.encryption or _JSON_KEYS,
    # LANGGRAPH_AES_KEY and LANGGRAPH_AES_FALLBACK_KEYS: the keys checkpoints are sealed with (checkpoints.encryption).
    "CHECKPOINT_KEYRING": _CHECKPOINT_KEYRING,
    # langgraph.json's http.disable_*: route families not served (deerflow_site.urls), webhooks not sent.
    "HTTP_DISABLED": _GRAPH_SOURCES.http_disabled,
    "WEBHOOKS_DISABLED": "webhooks" in _GRAPH_SOURCES.http_disabled,
    # langgraph.json's http.configurable_headers: request headers copied into a run's configurable.
    "CONFIGURABLE_HEADERS": _GRAPH_SOURCES.configurable_headers,
    # langgraph.json's http.logging_headers: request headers the access log records (deerflow_site.server_logs).
    "LOGGING_HEADERS": _GRAPH_SOURCES.logging_headers,
    # langgraph.json's http.mount_prefix: the API served under this path too (deerflow_site.asgi).
    "MOUNT_PREFIX": _GRAPH_SOURCES.mount_prefix,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("DEERFLOW_LOG_LEVEL", "INFO")},
    "loggers": {
        "django.request": {"level": "ERROR"},
        # httpx logs every request's full URL at INFO: a webhook's query string
        # may hold its token (runs.execution.webhooks logs the redacted URL).
        "httpx": {"level": "WARNING"},
    },
}
