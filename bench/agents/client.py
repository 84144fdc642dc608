"""The client: N concurrent runs of the streaming agent, each with its followers, every token timed on arrival.

One asyncio process, plain ``httpx`` (no SDK objects per event: the client's
own cost per event is part of what it measures, so it is kept small) and
``websockets`` for the protocol-v2 socket. Per run ``i``:

1. a protocol-v2 SSE follower (``POST /threads/{id}/stream/events``,
   channels ``messages`` and ``lifecycle``) opens on the thread, made
   beforehand, and waits for its response headers;
2. the run starts: the even runs with the protocol's ``run.start``
   (``POST /threads/{id}/commands``, what ``useStream`` sends), the odd
   ones with ``POST /threads/{id}/runs`` (``stream_mode:
   ["messages-tuple"]``) when the second follower is the classic stream;
3. the odd runs get their second follower: the classic run stream
   (``GET /threads/{id}/runs/{run_id}/stream``) or, with
   ``second="websocket"``, the protocol-v2 WebSocket (opened and subscribed
   before a ``run.start``).

With several servers, run ``i``'s three connections go to servers ``3i``,
``3i+1`` and ``3i+2`` modulo their number, as a round-robin balancer would
send them: with two, each run has a follower on the process executing it
and one on the other.

Each follower keeps, per token, its index and the nanoseconds from the
model's stamp (``bench/agents/agent.py``) to its arrival here, and at the
end says whether it saw the run's end. Indices give the missing, repeated
and reordered tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from bench.agents.agent import token_counts

TOKEN = re.compile(r"(\d+)@(\d+) ")
V2_CHANNELS = ["messages", "lifecycle"]
ROOT_TERMINALS = {"completed", "failed", "interrupted"}
ASSISTANT = "agent"


@dataclass
class Server:
    """One server as the client sees it: its base URL (``…/api`` for ours), key and websocket URL."""

    url: str
    api_key: str | None

    @property
    def headers(self) -> dict[str, str]:
        return {"x-api-key": self.api_key} if self.api_key else {}

    @property
    def ws_url(self) -> str:
        return "ws" + self.url.removeprefix("http")


@dataclass
class Follower:
    """What one follower of one run received."""

    kind: str  # "v2-sse", "classic", "v2-ws"
    run: int
    server: int
    expects_tokens: bool = True
    attached_ns: int = 0
    indices: list[int] = field(default_factory=list)
    latencies_ns: list[int] = field(default_factory=list)
    stamps_ns: list[int] = field(default_factory=list)
    # Protocol-v2 only: the envelope's ``timestamp`` (ms, when the server turned the chunk into the event)
    # minus the model's stamp, per token: the part of the latency before the server's log and bridge.
    to_event_ns: list[int] = field(default_factory=list)
    end: str = ""  # "completed", "failed", …, "closed", "timeout", "error: …"
    events: int = 0  # frames received, tokens or not

    def take(self, text: str, now_ns: int, event_ms: int | None = None) -> None:
        for match in TOKEN.finditer(text):
            stamp = int(match.group(2))
            self.indices.append(int(match.group(1)))
            self.stamps_ns.append(stamp)
            self.latencies_ns.append(now_ns - stamp)
            if event_ms is not None:
                self.to_event_ns.append(event_ms * 1_000_000 - stamp)

    def check(self, total: int) -> dict[str, int]:
        """Missing, duplicated and out-of-order tokens against 0 … total-1."""
        seen = set(self.indices)
        reordered = sum(1 for a, b in zip(self.indices, self.indices[1:], strict=False) if b < a)
        return {
            "received": len(self.indices),
            "missing": len(set(range(total)) - seen) if self.expects_tokens else 0,
            "duplicated": len(self.indices) - len(seen),
            "reordered": reordered,
            "unexpected": len(seen - set(range(total))),
        }


@dataclass
class RunRecord:
    index: int
    kind: str  # "v2" (run.start) or "classic" (POST /runs)
    thread_id: str
    run_id: str = ""
    started_ns: int = 0
    start_ms: float = 0.0
    error: str = ""
    followers: list[Follower] = field(default_factory=list)


def clients_for(servers: list[Server]) -> list[httpx.AsyncClient]:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=200)
    timeout = httpx.Timeout(60.0, read=None, pool=None)
    return [httpx.AsyncClient(base_url=s.url, headers=s.headers, limits=limits, timeout=timeout) for s in servers]


# -- SSE ----------------------------------------------------------------------------


async def sse_frames(response: httpx.Response):
    """Yield ``(event, data)`` of each SSE frame (comments skipped; ``\\r\\n`` and ``\\n`` both end lines)."""
    buffer = b""
    async for chunk in response.aiter_raw():
        buffer += chunk
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        while (end := buffer.find(b"\n\n")) >= 0:
            block, buffer = buffer[:end], buffer[end + 2 :]
            event, data = "message", []
            for line in block.split(b"\n"):
                if line.startswith(b"data:"):
                    data.append(line[5:].lstrip(b" "))
                elif line.startswith(b"event:"):
                    event = line[6:].strip().decode()
            if data:
                yield event, b"\n".join(data)


def v2_event(follower: Follower, envelope: dict) -> bool:
    """Take one protocol-v2 envelope; return True at the root's terminal lifecycle event."""
    follower.events += 1
    method = envelope.get("method")
    params = envelope.get("params") or {}
    data = params.get("data") or {}
    if method == "messages":
        if not params.get("namespace") and data.get("event") == "content-block-delta":
            delta = data.get("delta") or {}
            if delta.get("type") == "text-delta":
                stamp = params.get("timestamp")
                follower.take(delta.get("text") or "", time.time_ns(), stamp if isinstance(stamp, int) else None)
    elif method == "lifecycle" and not params.get("namespace") and data.get("event") in ROOT_TERMINALS:
        follower.end = data["event"]
        return True
    return False


async def follow_v2_sse(http: httpx.AsyncClient, thread_id: str, follower: Follower, attached: asyncio.Event) -> None:
    body = {"channels": V2_CHANNELS}
    headers = {"accept": "text/event-stream"}
    async with http.stream("POST", f"/threads/{thread_id}/stream/events", json=body, headers=headers) as response:
        if response.status_code != 200:
            follower.end = f"error: HTTP {response.status_code}"
            attached.set()
            return
        follower.attached_ns = time.time_ns()
        attached.set()
        async for event, data in sse_frames(response):
            if event == "error":
                follower.end = f"error: {data[:200].decode(errors='replace')}"
                return
            if v2_event(follower, orjson.loads(data)):
                return
    follower.end = follower.end or "closed"


async def follow_classic(http: httpx.AsyncClient, thread_id: str, run_id: str, follower: Follower) -> None:
    headers = {"accept": "text/event-stream"}
    async with http.stream("GET", f"/threads/{thread_id}/runs/{run_id}/stream", headers=headers) as response:
        if response.status_code != 200:
            follower.end = f"error: HTTP {response.status_code}"
            return
        follower.attached_ns = time.time_ns()
        async for event, data in sse_frames(response):
            follower.events += 1
            if event == "messages":
                chunk = orjson.loads(data)[0]
                content = chunk.get("content") if isinstance(chunk, dict) else None
                if isinstance(content, str):
                    follower.take(content, time.time_ns())
            elif event == "error":
                follower.end = f"error: {data[:200].decode(errors='replace')}"
                return
            elif event == "end":
                break
    follower.end = "completed"  # the classic stream ends with its run


async def follow_v2_ws(server: Server, thread_id: str, follower: Follower, attached: asyncio.Event) -> None:
    from websockets.asyncio.client import connect

    url = f"{server.ws_url}/threads/{thread_id}/stream/events"
    subscribe = {"id": 1, "method": "subscription.subscribe", "params": {"channels": V2_CHANNELS}}
    try:
        async with connect(url, additional_headers=server.headers, max_size=None, open_timeout=60) as socket:
            await socket.send(orjson.dumps(subscribe).decode())
            async for frame in socket:
                message = orjson.loads(frame)
                if message.get("type") == "success" and message.get("id") == 1:
                    follower.attached_ns = time.time_ns()
                    attached.set()
                    continue
                if message.get("type") == "error":
                    follower.end = f"error: {message.get('error')}: {message.get('message')}"
                    return
                if message.get("type") == "event" and v2_event(follower, message):
                    return
        follower.end = follower.end or "closed"
    finally:
        attached.set()


# -- one run --------------------------------------------------------------------------


def run_config(rate: float, seconds: float, start_delay: float) -> dict:
    return {"configurable": {"rate": rate, "seconds": seconds, "start_delay": start_delay}}


async def start_run(http: httpx.AsyncClient, record: RunRecord, config: dict) -> None:
    payload = {"messages": [{"role": "user", "content": f"run {record.index}"}]}
    started = time.perf_counter()
    if record.kind == "classic":
        body = {"assistant_id": ASSISTANT, "input": payload, "config": config, "stream_mode": ["messages-tuple"]}
        body["stream_resumable"] = True  # langgraph dev replays a joined run's stream from its start only then
        response = await http.post(f"/threads/{record.thread_id}/runs", json=body)
        response.raise_for_status()
        record.run_id = response.json()["run_id"]
    else:
        command = {"id": 1, "method": "run.start", "params": {"assistant_id": ASSISTANT, "input": payload}}
        command["params"]["config"] = config
        response = await http.post(f"/threads/{record.thread_id}/commands", json=command)
        response.raise_for_status()
        answer = response.json()
        if answer.get("type") != "success":
            raise RuntimeError(f"run.start: {answer}")
        record.run_id = answer["result"]["run_id"]
    record.start_ms = (time.perf_counter() - started) * 1000


@dataclass
class Workload:
    rate: float
    seconds: float
    start_delay: float
    second: str  # "classic" or "websocket"
    # langgraph dev sends no tokens on the protocol-v2 stream of a run created through POST /runs.
    v2_tokens_for_classic_runs: bool = True

    @property
    def tokens(self) -> int:
        return sum(token_counts(self.rate, self.seconds))


async def drive_run(record: RunRecord, servers: list[Server], https: list[httpx.AsyncClient], work: Workload) -> None:
    index, thread_id, kind = record.index, record.thread_id, record.kind
    placement = [(3 * index + k) % len(servers) for k in range(3)]
    start_on, first_on, second_on = placement
    tasks: list[asyncio.Task] = []
    v2 = Follower("v2-sse", index, first_on, expects_tokens=kind == "v2" or work.v2_tokens_for_classic_runs)
    record.followers.append(v2)
    attached = asyncio.Event()
    tasks.append(asyncio.ensure_future(follow_v2_sse(https[first_on], thread_id, v2, attached)))
    waits = [attached]
    if index % 2 and work.second == "websocket":
        ws = Follower("v2-ws", index, second_on)
        record.followers.append(ws)
        ws_attached = asyncio.Event()
        tasks.append(asyncio.ensure_future(follow_v2_ws(servers[second_on], thread_id, ws, ws_attached)))
        waits.append(ws_attached)
    try:
        for event in waits:
            await event.wait()
        record.started_ns = time.time_ns()
        await start_run(https[start_on], record, run_config(work.rate, work.seconds, work.start_delay))
        if kind == "classic":
            classic = Follower("classic", index, second_on)
            record.followers.append(classic)
            tasks.append(asyncio.ensure_future(follow_classic(https[second_on], thread_id, record.run_id, classic)))
        await asyncio.gather(*tasks)
    except Exception as exc:  # noqa: BLE001 - the run is counted as failed, with why
        record.error = f"{type(exc).__name__}: {exc}"[:300]
    except asyncio.CancelledError:
        record.error = record.error or "cut at the level's deadline"
        raise
    finally:
        for task in tasks:
            task.cancel()
        for task, follower in zip(tasks, record.followers, strict=False):
            with contextlib.suppress(BaseException):
                await task
            if not follower.end:
                follower.end = "cut" if record.error.startswith("cut") else "unfinished"


async def create_threads(https: list[httpx.AsyncClient], count: int, concurrency: int = 16) -> list[str]:
    """Make ``count`` threads (not measured), spread over the servers."""
    ids: list[str | None] = [None] * count
    next_index = iter(range(count))

    async def worker() -> None:
        for i in next_index:
            response = await https[i % len(https)].post("/threads", json={})
            response.raise_for_status()
            ids[i] = response.json()["thread_id"]

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return [i for i in ids if i is not None]


class LoopLag:
    """How late this process's event loop wakes a 50 ms sleeper: the client's own share of a token's latency."""

    def __init__(self, period: float = 0.05) -> None:
        self.period = period
        self.samples_ms: list[float] = []
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.period
            await asyncio.sleep(self.period)
            self.samples_ms.append(max(0.0, (loop.time() - due) * 1000))

    def __enter__(self) -> LoopLag:
        self._task = asyncio.ensure_future(self._run())
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._task is not None
        self._task.cancel()


async def drive_level(
    threads: list[str],
    servers: list[Server],
    work: Workload,
    *,
    ramp_seconds: float,
    deadline_seconds: float,
    on_tick=None,
) -> dict:
    """One run per thread, their starts spread evenly over ``ramp_seconds``; return every record and the wall time.

    Runs still going ``deadline_seconds`` after the last start are cut (their
    followers end ``cut``) and the level says how many.
    """
    n = len(threads)
    https = clients_for(servers)
    try:
        loop = asyncio.get_running_loop()
        records = [
            RunRecord(i, "classic" if i % 2 and work.second == "classic" else "v2", thread_id)
            for i, thread_id in enumerate(threads)
        ]

        async def staggered(record: RunRecord) -> None:
            await asyncio.sleep(ramp_seconds * record.index / n)
            await drive_run(record, servers, https, work)

        with LoopLag() as lag:
            started = loop.time()
            tasks = [asyncio.ensure_future(staggered(record)) for record in records]
            ticker = asyncio.ensure_future(_tick(on_tick)) if on_tick else None
            _, pending = await asyncio.wait(tasks, timeout=ramp_seconds + deadline_seconds)
            cut = len(pending)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            wall = loop.time() - started
            if ticker is not None:
                ticker.cancel()
        for record in records:
            if not record.started_ns and not record.error:
                record.error = "cut before it started"
        return {"records": records, "wall_seconds": wall, "cut": cut, "loop_lag_ms": lag.samples_ms}
    finally:
        for http in https:
            await http.aclose()


async def make_threads(servers: list[Server], count: int) -> list[str]:
    https = clients_for(servers)
    try:
        return await create_threads(https, count)
    finally:
        for http in https:
            await http.aclose()


async def _tick(on_tick) -> None:
    while True:
        await asyncio.sleep(1.0)
        on_tick()
