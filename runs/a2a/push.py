"""A2A push notification configs: where a task's end is POSTed, which the LangGraph Platform does not offer.

A config belongs to one task (a run) and names a URL, an optional token
(sent as ``X-A2A-Notification-Token``) and optional authentication (sent as
``Authorization: <scheme> <credentials>``). When the run ends (completed,
failed, canceled, or input-required), each config not yet notified gets the
task's JSON, as ``GetTask`` answers it in the version of the method that
registered the config, through the run webhooks' delivery
(``runs.services.webhooks``): the same URL rules at registration and at each
attempt, retries, backoff and ``webhook.sent``/``webhook.failed`` audit.

A config registered on a task that has already ended is notified at once.
The run's end and a registration racing it both try to claim the config
after their commits, and the claim is a conditional update: whichever comes
second finds nothing to send, so a config is notified exactly once.
"""

from __future__ import annotations

import logging
from typing import Any

from channels.db import database_sync_to_async
from django.db import transaction

from core.errors import Invalid
from runs.a2a import wire
from runs.a2a.tasks import Agent, atask_get, atask_object
from runs.a2a.wire import A2AError, PushConfig
from runs.models import A2APushConfig, Run
from runs.services.webhooks import a2a_pushes_send, awebhook_url_check, webhooks_disabled
from threads.models import UNFINISHED_STATUSES, ThreadMeta

logger = logging.getLogger(__name__)

# Where SendMessage's configuration carries a config: v1.0's name, then v0.3's.
SEND_FIELDS = ("taskPushNotificationConfig", "pushNotificationConfig")


def _enabled() -> None:
    if webhooks_disabled():  # http.disable_webhooks: no outbound calls of any kind
        raise A2AError(wire.PUSH_NOTIFICATION_NOT_SUPPORTED, "Push notifications are not supported by this server")


async def _url_check(config: PushConfig, field: str) -> None:
    """Refuse a URL the webhooks may not call, as ``-32602`` naming the field (the host is resolved)."""
    try:
        await awebhook_url_check(config.url)
    except Invalid as exc:
        raise A2AError(wire.INVALID_PARAMS, f"{field}url: {exc.reason}") from None


def _task_param(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise A2AError(wire.INVALID_PARAMS, f"{field}: a task id (a non-empty string) is required")
    return value


# -- storing -----------------------------------------------------------------------------------


def _save(*, run: Run, config: PushConfig, v03: bool) -> A2APushConfig:
    """Insert or replace the config (same id: replaced), bounded per task; then notify it if the task has ended.

    The run's row lock serializes creates on one task, so the bound holds;
    the check for an ended task reads after the commit (see the module's docstring).
    """
    task = wire.task_id(run.thread_id, run.run_id)
    config_id = config.config_id or task
    with transaction.atomic():
        Run.objects.select_for_update().filter(pk=run.pk).values_list("pk").first()
        configs = A2APushConfig.objects.filter(run_id=run.pk)
        if not configs.filter(config_id=config_id).exists() and configs.count() >= wire.MAX_PUSH_CONFIGS:
            raise A2AError(wire.INVALID_PARAMS, f"id: a task has at most {wire.MAX_PUSH_CONFIGS} push configs")
        stored, _ = A2APushConfig.objects.update_or_create(
            run_id=run.pk,
            config_id=config_id,
            defaults={
                "url": config.url,
                "token": config.token,
                "auth_scheme": config.scheme,
                "auth_credentials": config.credentials,
                "wire_version": "0.3" if v03 else "1.0",
            },
        )
    if Run.objects.filter(pk=run.pk).exclude(status__in=UNFINISHED_STATUSES).exists():
        a2a_pushes_send(run_id=run.pk)
    return stored


def _as_config(stored: A2APushConfig) -> PushConfig:
    return PushConfig(stored.config_id, stored.url, stored.token, stored.auth_scheme, stored.auth_credentials)


def _json(run: Run, stored: A2APushConfig, *, v03: bool) -> dict[str, Any]:
    task = wire.task_id(run.thread_id, run.run_id)
    return wire.push_config_json(task, stored.config_id, _as_config(stored), v03=v03)


# -- SendMessage's configuration ---------------------------------------------------------------


async def apush_config_at_send(params: dict[str, Any]) -> tuple[PushConfig, bool] | None:
    """The config a ``SendMessage`` registers, checked before anything starts: ``(config, v0.3 shape)`` or None."""
    configuration = params.get("configuration") or {}
    if not isinstance(configuration, dict):
        raise A2AError(wire.INVALID_PARAMS, "configuration: an object is required")
    name = next((n for n in SEND_FIELDS if configuration.get(n) not in (None, {})), None)
    if name is None:
        return None
    _enabled()
    field = f"configuration.{name}"
    config = wire.push_config(configuration[name], field=field)
    await _url_check(config, f"{field}.")
    return config, name == "pushNotificationConfig"


async def apush_config_register(run: Run, config: PushConfig, *, v03: bool) -> None:
    """Register ``config`` on the task a ``SendMessage`` just started (the caller's own)."""
    await database_sync_to_async(_save)(run=run, config=config, v03=v03)


# -- the four methods --------------------------------------------------------------------------


async def apush_config_create(owner, agent: Agent, params: dict[str, Any], *, v03: bool) -> dict[str, Any]:
    """``CreateTaskPushNotificationConfig`` (v0.3 ``tasks/pushNotificationConfig/set``)."""
    _enabled()
    task = _task_param(params.get("taskId"), "taskId")
    field = "pushNotificationConfig" if v03 else ""
    config = wire.push_config(params.get(field) if v03 else params, field=field)
    run, _thread = await atask_get(owner, agent, task, action="update")
    await _url_check(config, f"{field}." if field else "")
    stored = await database_sync_to_async(_save)(run=run, config=config, v03=v03)
    return _json(run, stored, v03=v03)


def _ids(params: dict[str, Any], *, v03: bool, required: bool) -> tuple[str, str | None]:
    """The task and config ids of a get/delete: v1.0 ``{taskId, id}``, v0.3 ``{id, pushNotificationConfigId}``."""
    if v03:
        task, config_id = _task_param(params.get("id"), "id"), params.get("pushNotificationConfigId")
        field = "pushNotificationConfigId"
    else:
        task, config_id, field = _task_param(params.get("taskId"), "taskId"), params.get("id"), "id"
    if config_id is not None and (not isinstance(config_id, str) or not config_id):
        raise A2AError(wire.INVALID_PARAMS, f"{field}: a config id (a non-empty string) is required")
    if required and config_id is None:
        raise A2AError(wire.INVALID_PARAMS, f"{field}: a config id is required")
    return task, config_id


def _config_of(run: Run, config_id: str) -> A2APushConfig:
    stored = A2APushConfig.objects.filter(run_id=run.pk, config_id=config_id).first()
    if stored is None:
        raise A2AError(wire.TASK_NOT_FOUND, "Push notification config not found")
    return stored


async def apush_config_get(owner, agent: Agent, params: dict[str, Any], *, v03: bool) -> dict[str, Any]:
    """``GetTaskPushNotificationConfig``: one config (v0.3 without a config id: the task's default one)."""
    _enabled()
    task, config_id = _ids(params, v03=v03, required=not v03)
    run, _thread = await atask_get(owner, agent, task)
    stored = await database_sync_to_async(_config_of)(run, config_id or wire.task_id(run.thread_id, run.run_id))
    return _json(run, stored, v03=v03)


def _configs(run: Run, offset: int, size: int) -> tuple[list[A2APushConfig], int]:
    configs = A2APushConfig.objects.filter(run_id=run.pk)
    return list(configs[offset : offset + size]), configs.count()


async def apush_config_list(owner, agent: Agent, params: dict[str, Any], *, v03: bool) -> Any:
    """``ListTaskPushNotificationConfigs``: v1.0 a page ``{configs, nextPageToken}``, v0.3 a bare list."""
    _enabled()
    task = _task_param(params.get("id" if v03 else "taskId"), "id" if v03 else "taskId")
    size = wire.MAX_PUSH_CONFIGS if v03 else wire.page_size(params.get("pageSize"))
    offset = 0 if v03 else wire.page_offset(params.get("pageToken"))
    run, _thread = await atask_get(owner, agent, task)
    page, total = await database_sync_to_async(_configs)(run, offset, size)
    configs = [_json(run, stored, v03=v03) for stored in page]
    if v03:
        return configs
    following = offset + len(page)
    return {"configs": configs, "nextPageToken": str(following) if following < total else ""}


def _delete(run: Run, config_id: str) -> None:
    if not A2APushConfig.objects.filter(run_id=run.pk, config_id=config_id).delete()[0]:
        raise A2AError(wire.TASK_NOT_FOUND, "Push notification config not found")


async def apush_config_delete(owner, agent: Agent, params: dict[str, Any], *, v03: bool) -> dict[str, Any] | None:
    """``DeleteTaskPushNotificationConfig``: v1.0 answers ``{}`` (``Empty``), v0.3 ``null``."""
    _enabled()
    task, config_id = _ids(params, v03=v03, required=True)
    run, _thread = await atask_get(owner, agent, task, action="update")
    assert config_id is not None  # _ids refuses a missing one
    await database_sync_to_async(_delete)(run, config_id)
    return None if v03 else {}


# -- what a push sends -------------------------------------------------------------------------


def _run_and_thread(run_id: str) -> tuple[Run, ThreadMeta]:
    run = Run.objects.select_related("thread").get(pk=run_id)
    return run, run.thread


async def atask_push_body(record: dict[str, Any], *, v03: bool, history: bool = True) -> dict[str, Any]:
    """The task's JSON as ``GetTask`` answers it (history of the context, up to 10 messages).

    ``history`` False (no runtime on this loop), or a state that cannot be
    read: the task without history, rather than no notification.
    """
    run, thread = await database_sync_to_async(_run_and_thread)(record["run_id"])
    try:
        task = await atask_object(run, thread, history=wire.MAX_HISTORY_LENGTH if history else 0)
    except Exception:
        logger.info("run %s: A2A push without history (state unreadable)", run.run_id, exc_info=True)
        task = await atask_object(run, thread, history=0)
    return wire.v03("GetTask", task) if v03 else task
