"""A2A's JSON shapes and errors: v1.0 (ProtoJSON, ``SendMessage``…) and v0.3 (``message/send``…), no I/O.

Everything is built in v1.0's shape (``TASK_STATE_COMPLETED``, ``ROLE_AGENT``,
parts ``{"text": …}``, stream results ``{"statusUpdate": …}``); a request
that used a v0.3 method name gets its answer converted (``v03``): lowercase
states and roles, ``kind`` on every object and part, ``final`` on status
updates, a task answered bare. The LangGraph Platform answers the two
vocabularies the same way.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

JSONRPC = "2.0"
MAX_HISTORY_LENGTH = 10
HISTORY_SCOPE_HEADER = "LangGraph-A2A-History-Scope"

# v0.3 name -> v1.0 name; a v1.0 name maps to itself.
METHODS = {
    "SendMessage": "SendMessage",
    "SendStreamingMessage": "SendStreamingMessage",
    "GetTask": "GetTask",
    "ListTasks": "ListTasks",
    "CancelTask": "CancelTask",
    "SubscribeToTask": "SubscribeToTask",
    "GetExtendedAgentCard": "GetExtendedAgentCard",
    "CreateTaskPushNotificationConfig": "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig": "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs": "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig": "DeleteTaskPushNotificationConfig",
    "message/send": "SendMessage",
    "message/stream": "SendStreamingMessage",
    "tasks/get": "GetTask",
    "tasks/list": "ListTasks",
    "tasks/cancel": "CancelTask",
    "tasks/resubscribe": "SubscribeToTask",
    "agent/getAuthenticatedExtendedCard": "GetExtendedAgentCard",
    "tasks/pushNotificationConfig/set": "CreateTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/get": "GetTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/list": "ListTaskPushNotificationConfigs",
    "tasks/pushNotificationConfig/delete": "DeleteTaskPushNotificationConfig",
}
STREAMING = frozenset({"SendStreamingMessage", "SubscribeToTask"})

# JSON-RPC's own codes, then A2A's (the a2a-sdk's JSON_RPC_ERROR_CODE_MAP).
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
PUSH_NOTIFICATION_NOT_SUPPORTED = -32003
UNSUPPORTED_OPERATION = -32004
CONTENT_TYPE_NOT_SUPPORTED = -32005

SUBMITTED, WORKING, COMPLETED, FAILED = (
    "TASK_STATE_SUBMITTED",
    "TASK_STATE_WORKING",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
)
CANCELED, INPUT_REQUIRED = "TASK_STATE_CANCELED", "TASK_STATE_INPUT_REQUIRED"
TERMINAL_STATES = frozenset({COMPLETED, FAILED, CANCELED, "TASK_STATE_REJECTED"})
STATE_NAMES = frozenset(
    {SUBMITTED, WORKING, COMPLETED, FAILED, CANCELED, INPUT_REQUIRED, "TASK_STATE_REJECTED", "TASK_STATE_AUTH_REQUIRED"}
)
RUN_STATES = {
    "queued": SUBMITTED,
    "pending": SUBMITTED,
    "running": WORKING,
    "success": COMPLETED,
    "error": FAILED,
    "timeout": FAILED,
    "interrupted": CANCELED,
}
ARTIFACT_NAME = "Assistant Response"
# A task's push notification configs: bounded, since each is one more POST at the task's end.
MAX_PUSH_CONFIGS = 10
MAX_PUSH_FIELD = 4096
# RFC 9110's token: what an HTTP authentication scheme may be spelled with.
_AUTH_SCHEME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$")


class A2AError(Exception):
    """A refusal answered as a JSON-RPC error object (HTTP 200)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def result(request_id: Any, value: Any) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC, "id": request_id, "result": value}


def error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC, "id": request_id, "error": {"code": code, "message": message}}


def task_state(run_status: str, *, awaiting_input: bool = False) -> str:
    """Map a run's status onto a task state; a run that ended on an ``interrupt()`` is ``input-required``."""
    if run_status == "success" and awaiting_input:
        return INPUT_REQUIRED
    return RUN_STATES.get(run_status, SUBMITTED)


def task_id(thread_id: str, run_id: str) -> str:
    """``<contextId>:<run id>``, as the Platform composes it; a bare run id is accepted too."""
    return f"{thread_id}:{run_id}"


def split_task_id(value: Any) -> tuple[str | None, str]:
    if not isinstance(value, str) or not value:
        raise A2AError(INVALID_PARAMS, "id: a task id (a non-empty string) is required")
    thread_id, _, run_id = value.rpartition(":")
    return thread_id or None, run_id


def text_message(role: str, text: str, *, message_id: str, context_id: str, task: str | None) -> dict[str, Any]:
    message: dict[str, Any] = {
        "messageId": message_id,
        "contextId": context_id,
        "role": role,
        "parts": [{"text": text}],
    }
    if task:
        message["taskId"] = task
    return message


def artifact(run_id: str, text: str) -> dict[str, Any]:
    return {"artifactId": f"{run_id}:response", "name": ARTIFACT_NAME, "parts": [{"text": text}]}


# -- reading requests --------------------------------------------------------------------------


def message_text(message: Any) -> str:
    """Return the text a user's A2A message carries (text parts; data parts as JSON); refuse files."""
    if not isinstance(message, dict):
        raise A2AError(INVALID_PARAMS, "message: an object is required")
    role = message.get("role")
    if role not in ("user", "ROLE_USER", None):
        raise A2AError(INVALID_PARAMS, f"message.role: {role!r} is not a user's role")
    parts = message.get("parts")
    if not isinstance(parts, list) or not parts:
        raise A2AError(INVALID_PARAMS, "message.parts: a non-empty list is required")
    texts = []
    for part in parts:
        if not isinstance(part, dict):
            raise A2AError(INVALID_PARAMS, "message.parts: each part must be an object")
        kind = part.get("kind")
        if kind in (None, "text") and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind in (None, "data") and "data" in part:
            texts.append(json.dumps(part["data"], ensure_ascii=False))
        elif kind == "file" or {"file", "url", "raw"} & part.keys():
            raise A2AError(CONTENT_TYPE_NOT_SUPPORTED, "file parts are not supported; send text or data parts")
        else:
            raise A2AError(INVALID_PARAMS, "message.parts: a part needs text or data")
    return "\n".join(texts)


def history_length(value: Any, *, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise A2AError(INVALID_PARAMS, "historyLength must be a non-negative integer")
    if value > MAX_HISTORY_LENGTH:
        raise A2AError(INVALID_PARAMS, f"historyLength cannot exceed {MAX_HISTORY_LENGTH}")
    return value


def history_scope(*candidates: Any) -> str:
    """The first ``historyScope`` given (params, configuration, header): ``context`` (default) or ``task``."""
    scope = next((c for c in candidates if c is not None), "context")
    if scope not in ("context", "task"):
        raise A2AError(INVALID_PARAMS, "historyScope must be 'context' or 'task'")
    return scope


def page_size(value: Any) -> int:
    if value is None:
        return 50
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100:
        raise A2AError(INVALID_PARAMS, "pageSize must be an integer between 1 and 100")
    return value


def page_offset(token: Any) -> int:
    if token in (None, ""):
        return 0
    if not isinstance(token, str) or not token.isdigit():
        raise A2AError(INVALID_PARAMS, "pageToken: not a token this server issued")
    return int(token)


def state_filter(value: Any) -> str | None:
    if value in (None, "", "TASK_STATE_UNSPECIFIED"):
        return None
    state = value if isinstance(value, str) and value.startswith("TASK_STATE_") else _from_v03_state(value)
    if state not in STATE_NAMES:
        raise A2AError(INVALID_PARAMS, f"status: {value!r} is not a task state")
    return state


def _from_v03_state(value: Any) -> str:
    return f"TASK_STATE_{value.upper().replace('-', '_')}" if isinstance(value, str) else ""


# -- push notification configs ------------------------------------------------------------------


@dataclass(frozen=True)
class PushConfig:
    """A push notification config as a request gave it (``id`` None: the task's own id is its id)."""

    config_id: str | None
    url: str
    token: str = ""
    scheme: str = ""
    credentials: str = ""


def push_config(value: Any, *, field: str) -> PushConfig:
    """Read a config (v1.0's ``{url, id, token, authentication: {scheme, credentials}}``, or v0.3's ``schemes``).

    Refusals name the field (``field`` is where the config sits in the params). The URL's
    rules (scheme, host, addresses) are the webhooks', checked by the caller.
    """
    if not isinstance(value, dict):
        raise A2AError(INVALID_PARAMS, f"{field or 'params'}: an object is required")
    at = f"{field}." if field else ""
    config_id = _optional_text(value.get("id"), f"{at}id")
    if not isinstance(value.get("url"), str) or not value["url"]:
        raise A2AError(INVALID_PARAMS, f"{at}url: a URL is required")
    token = _optional_text(value.get("token"), f"{at}token", header=True) or ""
    scheme, credentials = _authentication(value.get("authentication"), f"{at}authentication")
    return PushConfig(config_id, value["url"], token, scheme, credentials)


def _optional_text(value: Any, field: str, *, header: bool = False) -> str | None:
    """A string field, or None; ``header``: sent as a header value, so printable ASCII only."""
    if value in (None, ""):
        return None
    if not isinstance(value, str) or len(value) > MAX_PUSH_FIELD:
        raise A2AError(INVALID_PARAMS, f"{field}: a string of at most {MAX_PUSH_FIELD} characters is required")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise A2AError(INVALID_PARAMS, f"{field}: control characters are not allowed")
    if header and not value.isascii():
        raise A2AError(INVALID_PARAMS, f"{field}: sent as a header value, so ASCII only")
    return value


def _authentication(value: Any, field: str) -> tuple[str, str]:
    """``(scheme, credentials)``: both or neither, the scheme an HTTP token (``Bearer``, ``Basic``…)."""
    if value in (None, {}):
        return "", ""
    if not isinstance(value, dict):
        raise A2AError(INVALID_PARAMS, f"{field}: an object is required")
    scheme = value.get("scheme")
    if scheme is None and isinstance(value.get("schemes"), list):  # v0.3: a list; the first is used
        scheme = value["schemes"][0] if value["schemes"] else None
    if not isinstance(scheme, str) or not _AUTH_SCHEME.match(scheme):
        raise A2AError(INVALID_PARAMS, f"{field}.scheme: an HTTP authentication scheme (e.g. Bearer) is required")
    credentials = _optional_text(value.get("credentials"), f"{field}.credentials", header=True)
    if not credentials:
        raise A2AError(INVALID_PARAMS, f"{field}.credentials: required with a scheme (sent as Authorization)")
    return scheme, credentials


def push_config_json(task: str, config_id: str, config: PushConfig, *, v03: bool) -> dict[str, Any]:
    """A stored config as ``TaskPushNotificationConfig``: v1.0's flat shape, or v0.3's nested one."""
    body: dict[str, Any] = {"id": config_id, "url": config.url}
    if config.token:
        body["token"] = config.token
    if config.scheme:
        scheme = {"schemes": [config.scheme]} if v03 else {"scheme": config.scheme}
        body["authentication"] = {**scheme, "credentials": config.credentials}
    return {"taskId": task, "pushNotificationConfig": body} if v03 else {"taskId": task, **body}


# -- v0.3 answers ------------------------------------------------------------------------------

_V03_KIND = {"task": "task", "message": "message", "statusUpdate": "status-update", "artifactUpdate": "artifact-update"}


def v03(method: str, value: Any) -> Any:
    """Convert a v1.0 result to what v0.3 method ``method`` answers."""
    if method in ("SendMessage", "SendStreamingMessage", "SubscribeToTask") and isinstance(value, dict):
        ((kind, inner),) = value.items()
        return _v03_object(kind, inner)
    if method in ("GetTask", "CancelTask"):
        return _v03_object("task", value)
    if method == "ListTasks":
        return {**value, "tasks": [_v03_object("task", t) for t in value["tasks"]]}
    return value


def _v03_object(kind: str, value: dict[str, Any]) -> dict[str, Any]:
    out = {"kind": _V03_KIND[kind], **value}
    if "status" in out:
        out["status"] = _v03_status(out["status"])
    if kind == "statusUpdate":
        out["final"] = value["status"]["state"] in TERMINAL_STATES or value["status"]["state"] == INPUT_REQUIRED
    if kind == "message":
        out = _v03_message(value)
    if "history" in out:
        out["history"] = [_v03_message(m) for m in out["history"]]
    if "artifacts" in out:
        out["artifacts"] = [{**a, "parts": _v03_parts(a["parts"])} for a in out["artifacts"]]
    if "artifact" in out:
        out["artifact"] = {**out["artifact"], "parts": _v03_parts(out["artifact"]["parts"])}
    return out


def _v03_status(status: dict[str, Any]) -> dict[str, Any]:
    out = {**status, "state": status["state"].removeprefix("TASK_STATE_").lower().replace("_", "-")}
    if "message" in out:
        out["message"] = _v03_message(out["message"])
    return out


def _v03_message(message: dict[str, Any]) -> dict[str, Any]:
    role = message["role"].removeprefix("ROLE_").lower()
    return {"kind": "message", **message, "role": role, "parts": _v03_parts(message["parts"])}


def _v03_parts(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"kind": "data" if "data" in p else "text", **p} for p in parts]
