"""Deliver a finished run's webhook: POST its final record, a bounded number of times, never raising.

Each attempt resolves the host again and, unless ``runs.webhooks.allow_private``,
refuses it when any address it now resolves to is not public (DNS rebinding:
the name checked at admission may point elsewhere by now). The request then
goes to the address that was checked, not to a second lookup: the URL's host
is replaced by that address, with ``Host`` and the TLS server name (SNI, and
so certificate verification) still the original host. Redirects are not
followed (a redirect could point anywhere); environment proxies are ignored.

An attempt is bounded by ``timeout_seconds`` from resolution to the response
status (the body is never read). A timeout, a connection error, 408, 429 and
5xx are retried up to ``max_attempts`` with a pause of ``backoff_seconds``
doubling each time; any other answer ends the delivery. The outcome is
logged and appended to the run's events (``webhook.sent``/``webhook.failed``,
category ``webhook``): the console's timeline shows it.

An A2A push (``job.a2a``) goes the same way; only what is sent differs: the
task's JSON (``GetTask``'s, in the registering method's version) and the
config's token and ``Authorization`` headers; its audit says ``a2a_push``.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
from channels.db import database_sync_to_async
from django.conf import settings

from checkpoints.accessor import astate_accessor
from checkpoints.serialization import serialize, serialize_channel_values
from core.bridge import dumps
from runs.a2a.push import atask_push_body
from runs.services.webhooks import (
    WebhookJob,
    WebhookRefused,
    aresolve,
    redacted_url,
    refused_reason,
    webhook_record_delivery,
)

logger = logging.getLogger(__name__)

USER_AGENT = "deerflow-gateway-webhook/1"
RETRYABLE_STATUSES = frozenset({408, 429})
_ssl_context: ssl.SSLContext | None = None


@dataclass
class Attempt:
    """One POST: the answer's status, or what went wrong, and how long it took."""

    status_code: int | None = None
    error: str | None = None
    elapsed_ms: int = 0
    # The host resolved to an address webhooks may not call: never retried.
    refused: bool = False

    @property
    def delivered(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300

    @property
    def retryable(self) -> bool:
        if self.status_code is None:
            return not self.refused
        return self.status_code >= 500 or self.status_code in RETRYABLE_STATUSES


def tls_context() -> ssl.SSLContext:
    """Return the verifying TLS context all deliveries share (built once: loading CAs takes milliseconds)."""
    global _ssl_context
    if _ssl_context is None:
        _ssl_context = ssl.create_default_context()
    return _ssl_context


async def apinned_request(
    url: str, *, allow_private: bool, extra: tuple[tuple[str, str], ...] = ()
) -> tuple[httpx.URL, dict[str, str], dict[str, Any]]:
    """Return (URL with the checked address as host, headers, request extensions) for one attempt.

    Raise ``WebhookRefused`` when the host now resolves to an address webhooks may not call.
    """
    target = httpx.URL(url)
    addresses = await aresolve(target.host, target.port or (443 if target.scheme == "https" else 80))
    if not allow_private and (reason := refused_reason(target.host, addresses)):
        raise WebhookRefused(reason)
    headers = {"Host": target.netloc.decode("ascii"), "User-Agent": USER_AGENT, "Content-Type": "application/json"}
    headers.update(extra)
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    return target.copy_with(host=addresses[0]), headers, extensions


def webhook_body(job: WebhookJob, values: dict[str, Any] | None) -> bytes:
    """Return the JSON sent: the run's final record, the thread's final ``values``, and when it was sent.

    For an A2A push, ``values`` is the task's JSON, sent as it is.
    """
    if job.a2a is not None:
        return dumps(values).encode()
    body = {**job.record, "values": values, "webhook_sent_at": datetime.now(UTC).isoformat()}
    return dumps(body).encode()


async def _attempt(client: httpx.AsyncClient, job: WebhookJob, values: dict[str, Any] | None, cfg) -> Attempt:
    started = time.monotonic()
    attempt = Attempt()
    try:
        async with asyncio.timeout(cfg.timeout_seconds):
            extra = job.a2a.headers if job.a2a is not None else ()
            url, headers, extensions = await apinned_request(job.url, allow_private=cfg.allow_private, extra=extra)
            request = client.build_request(
                "POST", url, content=webhook_body(job, values), headers=headers, extensions=extensions
            )
            response = await client.send(request, stream=True)
            attempt.status_code = response.status_code
            await response.aclose()  # the body is not read: a receiver cannot make us hold megabytes
    except WebhookRefused as exc:
        attempt.error, attempt.refused = f"refused: {exc}", True
    except (TimeoutError, httpx.TimeoutException):
        attempt.error = f"timed out after {cfg.timeout_seconds:g} s"
    except (httpx.HTTPError, OSError) as exc:
        attempt.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    attempt.elapsed_ms = round((time.monotonic() - started) * 1000)
    return attempt


async def _head_values(record: dict[str, Any]) -> dict[str, Any] | None:
    """Read the thread's state now (a run that never started, or whose executor died, ended there)."""
    try:
        accessor = await astate_accessor(record["graph_id"])
        snapshot = await accessor.aget(record["thread_id"])
    except Exception:
        logger.info("run %s: webhook without values (state unreadable)", record["run_id"], exc_info=True)
        return None
    values = serialize_channel_values(snapshot.values or {})
    if snapshot.interrupts:
        values["__interrupt__"] = serialize(list(snapshot.interrupts))
    return values


async def _payload(job: WebhookJob, *, read_values: bool) -> dict[str, Any] | None:
    """What ``webhook_body`` sends besides the record: the final values, or an A2A push's task."""
    if job.a2a is not None:
        return await atask_push_body(job.record, v03=job.a2a.v03, history=read_values)
    return job.values if job.values is not None or not read_values else await _head_values(job.record)


async def adeliver(job: WebhookJob, *, read_values: bool = True) -> list[Attempt]:
    """Deliver ``job``: attempts with backoff, then log and record the outcome; never raises.

    ``read_values`` False (no runtime on this loop): a job without values is sent with ``values: null``.
    """
    cfg = settings.DEERFLOW_CONFIG.runs.webhooks
    run_id = job.record["run_id"]
    attempts: list[Attempt] = []
    try:
        values = await _payload(job, read_values=read_values)
        client = httpx.AsyncClient(
            verify=tls_context(), trust_env=False, follow_redirects=False, timeout=cfg.timeout_seconds
        )
        async with client:
            for number in range(1, cfg.max_attempts + 1):
                attempt = await _attempt(client, job, values, cfg)
                attempts.append(attempt)
                if attempt.delivered or not attempt.retryable or number == cfg.max_attempts:
                    break
                await asyncio.sleep(cfg.backoff_seconds * 2 ** (number - 1))
    except Exception as exc:  # a bug here must not take the worker's loop down
        logger.exception("run %s: webhook delivery failed unexpectedly", run_id)
        attempts.append(Attempt(error=f"{type(exc).__name__}: {exc}"))
    await _record(job, attempts)
    return attempts


async def _record(job: WebhookJob, attempts: list[Attempt]) -> None:
    last = attempts[-1]
    delivered = last.delivered
    target = redacted_url(job.url)
    content: dict[str, Any] = {
        "url": target,
        "delivered": delivered,
        "status_code": last.status_code,
        "error": last.error,
        "attempts": len(attempts),
        "history": [asdict(a) for a in attempts],
    }
    what = "webhook"
    if job.a2a is not None:  # the audit names the push and its config, never its token or credentials
        content.update(kind="a2a_push", config_id=job.a2a.config_id, task_id=job.a2a.task_id)
        what = f"A2A push {job.a2a.config_id!r}"
    run_id, thread_id = job.record["run_id"], job.record["thread_id"]
    if delivered:
        logger.info("run %s: %s %s answered %s (attempt %d)", run_id, what, target, last.status_code, len(attempts))
    else:
        outcome = last.error or f"HTTP {last.status_code}"
        logger.warning(
            "run %s: %s %s not delivered after %d attempt(s): %s", run_id, what, target, len(attempts), outcome
        )
    try:
        await database_sync_to_async(webhook_record_delivery)(
            thread_id=thread_id, run_id=run_id, delivered=delivered, content=content
        )
    except Exception:
        logger.warning("run %s: the webhook's outcome could not be recorded", run_id, exc_info=True)
