"""Run-completion webhooks: which URLs are accepted, what is sent, and the delivery's trace.

A run's ``webhook`` receives the run's final record (what ``GET
/threads/{t}/runs/{r}`` answers, plus ``values``: the thread's state when the
run ended) once the run reaches a final status, whichever path finalized it:
the executor, a cancel before the run started, orphan recovery. Each of those
services calls ``webhook_after_commit`` inside its transaction; after the
commit the record is read and handed to this process's run worker, which
POSTs it (``runs.execution.webhooks``), so no network call ever happens while
a row is locked or before the outcome is durable.

Accepted URLs: ``http``/``https`` with a host, at most ``MAX_URL_LENGTH``
characters. Unless ``runs.webhooks.allow_private``, every address the host
resolves to must be a global unicast address (an IPv6 address carrying an IPv4
one, such as 6to4, is judged by that one): loopback, private, link-local,
multicast, reserved, unspecified and shared (carrier-grade NAT) addresses are
refused, at admission (422) and again at each send (DNS may answer
differently by then). The URL lives in ``Run.webhook``; kwargs, events and
logs carry ``redacted_url`` (a token in the query string stays secret).

The same run's end sends its A2A push notifications (``A2APushConfig``, the
task's JSON to each config's URL): ``webhook_after_commit`` claims the
configs not yet notified (``a2a_pushes_send``) and hands one job per config
to the same worker, with the same URL rules, retries and audit.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import threading
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import SplitResult, urlsplit

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.errors import Invalid
from runs import dispatch
from runs.models import A2APushConfig, Run
from runs.selectors import run_record
from runs.services.events import run_events_append

logger = logging.getLogger(__name__)

MAX_URL_LENGTH = 2048
# A resolver that does not answer within this long makes the URL unacceptable at admission.
RESOLVE_TIMEOUT_SECONDS = 5.0
REFUSED_KINDS = "loopback, private, link-local, multicast or reserved"


# Checked in this order: ipaddress counts loopback and link-local among the private networks too.
_PROBLEMS = (
    ("loopback", "a loopback address"),
    ("link_local", "a link-local address"),
    ("multicast", "a multicast address"),
    ("unspecified", "an unspecified address"),
    ("reserved", "a reserved address"),
    ("private", "a private address"),
)

# The well-known NAT64 prefix (RFC 6052): the IPv4 address is the last 32 bits.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# Deprecated IPv4-compatible addresses (RFC 4291 2.5.5.1): ::a.b.c.d.
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")


class WebhookRefused(Exception):
    """The webhook's host is (now) an address webhooks may not call."""


@dataclass(frozen=True)
class A2APush:
    """What makes a job an A2A push: the body is the task (``GetTask``'s JSON), the headers the config's."""

    config_id: str
    task_id: str
    v03: bool  # registered through a v0.3 method: the task in v0.3's shapes
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class WebhookJob:
    """One webhook to send: the URL, the run's final record and, when known, the thread's final values.

    ``values`` None: the sender reads the thread's head (a run cancelled
    before it started, or recovered as orphaned, ended where the head is).
    ``a2a`` set: an A2A push notification, whose body is the task instead.
    """

    url: str
    record: dict[str, Any]
    values: dict[str, Any] | None = None
    a2a: A2APush | None = None


def _allow_private() -> bool:
    return settings.DEERFLOW_CONFIG.runs.webhooks.allow_private


def webhook_url_syntax(url: Any) -> SplitResult:
    """Return the split URL, or raise ``Invalid("webhook")`` for anything but an http(s) URL with a host."""
    if not isinstance(url, str):
        raise Invalid("webhook", "must be a URL string")
    if len(url) > MAX_URL_LENGTH:
        raise Invalid("webhook", f"must be at most {MAX_URL_LENGTH} characters")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise Invalid("webhook", "must not contain whitespace or control characters")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise Invalid("webhook", "must be an http:// or https:// URL")
    try:
        parts.port  # noqa: B018 (raises on a port that is not a number in range)
    except ValueError:
        raise Invalid("webhook", "has an invalid port") from None
    if not parts.hostname:
        raise Invalid("webhook", "must name a host")
    return parts


def _host(parts: SplitResult) -> str:
    host = parts.hostname
    assert host is not None, "webhook_url_syntax refuses a URL without a host"
    return host


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    """Return (which form, the IPv4 address) for an IPv6 address whose packets reach an IPv4 host, else None.

    Python calls 2002::/16 (6to4) global whatever it embeds, so
    ``[2002:7f00:1::]`` passed as public while a 6to4 relay delivers it to
    127.0.0.1. A Teredo packet goes to its client's (de-obfuscated) address,
    not to the server's.
    """
    if ip.sixtofour is not None:
        return "a 6to4 address", ip.sixtofour
    if ip.teredo is not None:
        return "a Teredo address", ip.teredo[1]
    if ip in _NAT64:
        return "a NAT64 address", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _IPV4_COMPATIBLE and int(ip) > 1:  # :: and ::1 are themselves, not IPv4
        return "an IPv4-compatible address", ipaddress.IPv4Address(int(ip))
    return None


def _ip_problem(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    for kind, problem in _PROBLEMS:
        if getattr(ip, f"is_{kind}"):
            return problem
    if not ip.is_global:
        return "not a public address"
    return None


def address_problem(address: str) -> str | None:
    """Return why a webhook may not call ``address`` ("a loopback address", …), None if it may.

    An IPv6 address that carries an IPv4 one is judged by the IPv4 address
    its packets reach. A NAT64 address of a public IPv4 host is allowed
    (DNS64 answers only those on an IPv6-only network); the other forms are
    then judged as IPv6 too (Teredo and IPv4-compatible are not global).
    """
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if isinstance(ip, ipaddress.IPv6Address) and (embedded := _embedded_ipv4(ip)):
        form, ipv4 = embedded
        if problem := _ip_problem(ipv4):
            return f"{form} embedding {ipv4}, {problem}"
        if form == "a NAT64 address":
            return None
    return _ip_problem(ip)


def _literal(host: str) -> str | None:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


def _addresses(infos) -> list[str]:
    return list(dict.fromkeys(info[4][0] for info in infos))


def resolve(host: str, port: int) -> list[str]:
    """Return the addresses ``host`` resolves to (an IP literal is itself); raise OSError if none."""
    if (literal := _literal(host)) is not None:
        return [literal]
    return _addresses(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))


async def aresolve(host: str, port: int) -> list[str]:
    """``resolve`` on the event loop (the resolver runs in the loop's executor)."""
    if (literal := _literal(host)) is not None:
        return [literal]
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return _addresses(infos)


def _default_port(parts: SplitResult) -> int:
    return parts.port or (443 if parts.scheme == "https" else 80)


def refused_reason(host: str, addresses: list[str]) -> str | None:
    """Return why calling ``host`` at ``addresses`` is refused, None when every address is allowed."""
    for address in addresses:
        if problem := address_problem(address):
            what = f"{host} is {problem}" if _literal(host) == address else f"{host} resolves to {address}, {problem}"
            return f"{what}; webhooks may not call {REFUSED_KINDS} addresses (runs.webhooks.allow_private allows them)"
    return None


def _check_addresses(host: str, addresses: list[str]) -> None:
    if reason := refused_reason(host, addresses):
        raise Invalid("webhook", reason)


def webhook_url_check(url: Any) -> str:
    """Return ``url`` if a webhook may call it, else raise ``Invalid("webhook")`` saying why.

    Resolves the host (blocking; ``awebhook_url_check`` is the event loop's twin).
    """
    parts = webhook_url_syntax(url)
    if _allow_private():
        return url
    host = _host(parts)
    try:
        addresses = resolve(host, _default_port(parts))
    except OSError:
        raise Invalid("webhook", f"host {host} does not resolve") from None
    _check_addresses(host, addresses)
    return url


async def awebhook_url_check(url: Any) -> str:
    """``webhook_url_check`` without blocking the event loop (resolution bounded by ``RESOLVE_TIMEOUT_SECONDS``)."""
    parts = webhook_url_syntax(url)
    if _allow_private():
        return url
    host = _host(parts)
    try:
        addresses = await asyncio.wait_for(aresolve(host, _default_port(parts)), RESOLVE_TIMEOUT_SECONDS)
    except (OSError, TimeoutError):
        raise Invalid("webhook", f"host {host} does not resolve") from None
    _check_addresses(host, addresses)
    return url


def redacted_url(url: str) -> str:
    """Return ``url`` without credentials, query values or fragment: what kwargs, events and logs show."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    query = "?…" if parts.query else ""
    return f"{parts.scheme}://{netloc}{parts.path}{query}"


# -- after a run's final status commits -----------------------------------------


def webhook_after_commit(*, run_id: str, url: str, values: dict[str, Any] | None = None) -> None:
    """Send the run's webhook and A2A pushes once the current transaction commits (nothing if it rolls back).

    Call inside the transaction that records the final status. ``robust``:
    a failure to hand them over is logged, never raised into the finalizing
    caller.
    """
    if not webhooks_disabled():
        transaction.on_commit(partial(_hand_over, run_id, url, values), robust=True)


def webhooks_disabled() -> bool:
    """langgraph.json's ``http.disable_webhooks``: no run webhooks, no A2A push notifications."""
    return bool(settings.DEERFLOW.get("WEBHOOKS_DISABLED"))


def _hand_over(run_id: str, url: str, values: dict[str, Any] | None) -> None:
    """Read the committed record and give the jobs to this process's worker (else a thread of their own)."""
    run = Run.objects.filter(pk=run_id).first() if url else None
    if run is not None:
        _give(WebhookJob(url=url, record=run_record(run), values=values))
    a2a_pushes_send(run_id=run_id, run=run)


def a2a_pushes_send(*, run_id: str, run: Run | None = None) -> int:
    """Claim the ended run's A2A push configs not yet notified and hand each over; return how many.

    The claim (``notified_at``, set by a conditional update before anything
    is sent) is what makes a config notified once: a second pass (the run's
    end and a registration racing it, a rerun) finds nothing left to claim.
    A run without configs costs one indexed read.
    """
    pending = list(A2APushConfig.objects.filter(run_id=run_id, notified_at__isnull=True))
    claimed = [
        config
        for config in pending
        if A2APushConfig.objects.filter(pk=config.pk, notified_at__isnull=True).update(notified_at=timezone.now())
    ]
    run = run or (Run.objects.filter(pk=run_id).first() if claimed else None)
    if not claimed or run is None:
        return 0
    record, task_id = run_record(run), f"{run.thread_id}:{run.run_id}"
    for config in claimed:
        push = A2APush(config.config_id, task_id, config.wire_version == "0.3", a2a_push_headers(config))
        _give(WebhookJob(url=config.url, record=record, a2a=push))
    return len(claimed)


def a2a_push_headers(config: A2APushConfig) -> tuple[tuple[str, str], ...]:
    """The config's own headers: its token (``X-A2A-Notification-Token``) and ``Authorization: <scheme> <credentials>``."""
    headers = []
    if config.token:
        headers.append(("X-A2A-Notification-Token", config.token))
    if config.auth_scheme and config.auth_credentials:
        headers.append(("Authorization", f"{config.auth_scheme} {config.auth_credentials}"))
    return tuple(headers)


def _give(job: WebhookJob) -> None:
    """Give ``job`` to this process's worker, else deliver it on a thread of its own."""
    run_id = job.record["run_id"]
    worker = dispatch.webhook_sink()
    loop = worker.loop if worker is not None else None
    if worker is not None and loop is not None and loop.is_running():
        try:
            loop.call_soon_threadsafe(worker.send_webhook, job)
            return
        except RuntimeError:  # the loop closed meanwhile
            pass
    # No worker here (a management command): deliver on a thread, without reading state; the
    # delivery code is execution's, imported only in such a process.
    from runs.execution.webhooks import adeliver

    threading.Thread(target=asyncio.run, args=(adeliver(job, read_values=False),), name=f"webhook-{run_id}").start()


def webhook_record_delivery(*, thread_id: str, run_id: str, delivered: bool, content: dict[str, Any]) -> int:
    """Append the delivery's outcome to the run's events (``webhook.sent`` / ``webhook.failed``).

    Nothing is written when the thread is gone (a stateless run's thread is
    deleted on completion); the log line remains.
    """
    event = {"event_type": "webhook.sent" if delivered else "webhook.failed", "content": content}
    return run_events_append(thread_id=thread_id, run_id=run_id, events=[event])
