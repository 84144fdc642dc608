"""The soak's traffic: K clients issue a seeded mix of requests against either server, and a ledger
records every write the service acknowledged, to be checked once the faults are over.

A request that fails while a fault is in progress (a refused connection, a
``503`` while the database is cut, a stream cut short by a killed server) is
expected and counted as such; one that fails outside every fault window is
counted apart and described, with a ``500``'s body, in the report. A
``409`` is the service refusing on purpose (``reject`` on a busy thread, a
state update while a run is in flight, a cancel of a finished run): counted
as refused, not as a failure.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx
from langgraph_sdk import get_client

from bench.soak.cluster import FaultLog

STRATEGIES = ("reject", "interrupt", "rollback", "enqueue")
# Relative weights of the request kinds a client draws.
MIX = {
    "create_thread": 1,
    "wait": 3,
    "create_join": 2,
    "stream": 2,
    "thread_stream": 2,
    "join_stream": 1,
    "cancel": 1,
    "update_state": 1,
    "history": 2,
    "store_put": 1,
}
# The schedule of the soak's crons: croniter's sixth field is seconds, so one slot every 3 s.
CRON_SCHEDULE = "* * * * * */3"
CRON_TEXT = "cron tick"
# One request's bound: a wait or stream on a run whose executor died ends within a lease or two.
REQUEST_SECONDS = 30


def human(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


@dataclass(frozen=True)
class AdmittedRun:
    run_id: str
    thread_id: str
    text: str
    strategy: str
    kind: str


class Refused(Exception):
    """The service said no on purpose (a 409)."""


@dataclass
class Ledger:
    """What the service acknowledged (2xx), and how every request ended."""

    threads: dict[str, str] = field(default_factory=dict)  # thread id -> "chat" | "cron"
    runs: dict[str, AdmittedRun] = field(default_factory=dict)
    checkpoints: list[tuple[str, str]] = field(default_factory=list)  # (thread id, checkpoint id) of state updates
    store: dict[tuple[str, str], dict] = field(default_factory=dict)  # (namespace, key) -> value put
    crons: dict[str, str] = field(default_factory=dict)  # cron id -> thread id
    live: dict[str, AdmittedRun] = field(default_factory=dict)  # admitted by a request still waiting on it
    outcomes: Counter = field(default_factory=Counter)  # (kind, "ok" | "refused" | "fault" | "other")
    failures: list[str] = field(default_factory=list)  # the "other" ones, described

    @property
    def requests(self) -> int:
        return sum(self.outcomes.values())

    def chat_threads(self) -> list[str]:
        return [t for t, kind in self.threads.items() if kind == "chat"]


def _describe(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, httpx.Response):
        try:
            body = response.text
        except httpx.ResponseNotRead:
            body = "(streamed)"
        return f"{response.status_code} {response.request.method} {response.request.url.path}: {body[:600]}"
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return response.status_code if isinstance(response, httpx.Response) else None


class Client:
    """One simulated user: a seeded random walk over the request kinds, on either server."""

    def __init__(self, index: int, urls: list[str], key: str, ledger: Ledger, faults: FaultLog, seed: int) -> None:
        self.index = index
        self.urls = urls
        self.key = key
        self.ledger = ledger
        self.faults = faults
        self.rng = random.Random(f"{seed}:{index}")
        self.sdks = [get_client(url=url, api_key=key) for url in urls]
        self.http = [
            httpx.AsyncClient(base_url=url, headers={"x-api-key": key}, timeout=REQUEST_SECONDS) for url in urls
        ]
        self.counter = 0
        self.admitted: list[str] = []  # the runs the request in progress admitted

    async def close(self) -> None:
        for http in self.http:
            await http.aclose()
        for sdk in self.sdks:
            await sdk.http.client.aclose()

    def _text(self) -> str:
        self.counter += 1
        tag = f"soak {self.index}.{self.counter}"
        # A slow reply keeps the thread busy, so the next run on it meets a multitask strategy.
        return f"/slow {self.rng.choice((0.5, 1, 2))} {tag}" if self.rng.random() < 0.4 else tag

    def _pick(self) -> int:
        return self.rng.randrange(len(self.urls))

    async def attempt(self, kind: str, action) -> None:
        """Run one request and count how it ended."""
        start = time.monotonic()
        self.admitted = []
        try:
            async with asyncio.timeout(REQUEST_SECONDS):
                await action()
            outcome = "ok"
        except Refused:
            outcome = "refused"
        except Exception as exc:  # noqa: BLE001 — every failure is classified, none is swallowed
            if _status(exc) == 409:
                outcome = "refused"
            elif self.faults.overlaps(start, time.monotonic()):
                outcome = "fault"
            else:
                outcome = "other"
                self.ledger.failures.append(f"{kind}: {_describe(exc)}")
        for run_id in self.admitted:  # this request no longer waits on them
            self.ledger.live.pop(run_id, None)
        self.ledger.outcomes[(kind, outcome)] += 1

    async def loop(self, stop: asyncio.Event, budget: Budget) -> None:
        kinds, weights = zip(*MIX.items(), strict=True)
        while not stop.is_set() and budget.take():
            kind = self.rng.choices(kinds, weights)[0]
            if kind != "create_thread" and not self.ledger.chat_threads():
                kind = "create_thread"
            await self.attempt(kind, getattr(self, kind))

    def _thread(self) -> str:
        return self.rng.choice(self.ledger.chat_threads())

    def _run(self) -> AdmittedRun | None:
        # Mostly a run some client still waits on (likely running: a cancel or join stream means something there),
        # else a recent one.
        live = list(self.ledger.live.values())
        recent = live if live and self.rng.random() < 0.8 else list(self.ledger.runs.values())[-20:]
        return self.rng.choice(recent) if recent else None

    def _admitted(self, run_id: str, thread_id: str, text: str, strategy: str, kind: str) -> None:
        self.ledger.runs[run_id] = self.ledger.live[run_id] = AdmittedRun(run_id, thread_id, text, strategy, kind)
        self.admitted.append(run_id)

    async def create_thread(self) -> None:
        thread = await self.sdks[self._pick()].threads.create(metadata={"soak": "chat"})
        self.ledger.threads[thread["thread_id"]] = "chat"

    async def wait(self) -> None:
        thread_id, text, strategy = self._thread(), self._text(), self.rng.choice(STRATEGIES)
        body = {"assistant_id": "lead_agent", "input": human(text), "multitask_strategy": strategy}
        async with self.http[self._pick()].stream("POST", f"/threads/{thread_id}/runs/wait", json=body) as response:
            if response.status_code == 409:
                raise Refused
            response.raise_for_status()
            run_id = response.headers["content-location"].rstrip("/").rsplit("/", 1)[-1]
            self._admitted(run_id, thread_id, text, strategy, "wait")
            json.loads(await response.aread())  # the final values (or the run's error), whole

    async def create_join(self) -> None:
        sdk = self.sdks[self._pick()]
        thread_id, text, strategy = self._thread(), self._text(), self.rng.choice(STRATEGIES)
        run = await sdk.runs.create(thread_id, "lead_agent", input=human(text), multitask_strategy=strategy)
        self._admitted(run["run_id"], thread_id, text, strategy, "create_join")
        # Joined through the other server half the time: the run executes wherever it was claimed.
        await self.sdks[self._pick()].runs.join(thread_id, run["run_id"])

    async def stream(self) -> None:
        thread_id, text, strategy = self._thread(), self._text(), self.rng.choice(STRATEGIES)
        parts = self.sdks[self._pick()].runs.stream(
            thread_id,
            "lead_agent",
            input=human(text),
            multitask_strategy=strategy,
            stream_mode=self.rng.choice(("values", "messages-tuple", "updates")),
        )
        async for part in parts:
            if part.event == "metadata" and "run_id" in (part.data or {}):
                self._admitted(part.data["run_id"], thread_id, text, strategy, "stream")

    async def thread_stream(self) -> None:
        """Protocol v2: ``run.start`` over ``/commands``, then the thread's event log up to that run's end."""
        http = self.http[self._pick()]
        thread_id, text, strategy = self._thread(), self._text(), self.rng.choice(STRATEGIES)
        command = {
            "id": self.counter,
            "method": "run.start",
            "params": {"assistant_id": "lead_agent", "input": human(text), "multitaskStrategy": strategy},
        }
        answer = await http.post(f"/threads/{thread_id}/commands", json=command)
        answer.raise_for_status()
        envelope = answer.json()
        if envelope["type"] != "success":
            if envelope.get("message", "").startswith("409: "):  # a Conflict, as the envelope carries it
                raise Refused
            raise RuntimeError(f"run.start answered {envelope}")
        run_id = envelope["result"]["run_id"]
        self._admitted(run_id, thread_id, text, strategy, "thread_stream")
        body = {"channels": ["lifecycle", "messages", "values"], "since": envelope["meta"]["applied_through_seq"]}
        follow = self.http[self._pick()]
        async with follow.stream("POST", f"/threads/{thread_id}/stream/events", json=body) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[6:])
                data = event["params"]["data"] or {}
                if (
                    event["method"] == "lifecycle"
                    and not event["params"]["namespace"]
                    and run_id in event["event_id"]  # "<run_id>:<n>", or "synth:<run_id>:…" for a terminal
                    and data.get("event") in ("completed", "failed", "interrupted")
                ):
                    return
        raise RuntimeError(f"the thread stream ended before run {run_id} did")

    async def join_stream(self) -> None:
        run = self._run()
        if run is None:
            return
        parts = self.sdks[self._pick()].runs.join_stream(run.thread_id, run.run_id, last_event_id="-1")
        async for _ in parts:
            pass

    async def cancel(self) -> None:
        run = self._run()
        if run is None:
            return
        action = self.rng.choice(("interrupt", "rollback"))
        await self.sdks[self._pick()].runs.cancel(run.thread_id, run.run_id, action=action)

    async def update_state(self) -> None:
        thread_id = self._thread()
        self.counter += 1
        answer = await self.sdks[self._pick()].threads.update_state(
            thread_id, {"title": f"soak title {self.index}.{self.counter}"}
        )
        self.ledger.checkpoints.append((thread_id, answer["checkpoint"]["checkpoint_id"]))

    async def history(self) -> None:
        thread_id = self.rng.choice(list(self.ledger.threads))
        sdk = self.sdks[self._pick()]
        if self.rng.random() < 0.5:
            await sdk.threads.get_history(thread_id, limit=self.rng.choice((1, 10, 50)))
        else:
            await sdk.threads.get_state(thread_id)

    async def store_put(self) -> None:
        self.counter += 1
        namespace, key = f"soak.c{self.index}", f"k{self.counter}"
        value = {"client": self.index, "n": self.counter}
        await self.sdks[self._pick()].store.put_item(namespace.split("."), key=key, value=value)
        self.ledger.store[(namespace, key)] = value


class Budget:
    """At most ``requests`` requests in all (None: no cap)."""

    def __init__(self, requests: int | None) -> None:
        self.left = requests

    def take(self) -> bool:
        if self.left is None:
            return True
        if self.left <= 0:
            return False
        self.left -= 1
        return True


async def create_crons(url: str, key: str, ledger: Ledger, count: int) -> None:
    """Give ``count`` threads of their own a cron each, firing every 3 s (only crons run on them)."""
    sdk = get_client(url=url, api_key=key)
    try:
        for _ in range(count):
            thread = await sdk.threads.create(metadata={"soak": "cron"})
            ledger.threads[thread["thread_id"]] = "cron"
            cron = await sdk.crons.create_for_thread(
                thread["thread_id"], "lead_agent", schedule=CRON_SCHEDULE, input=human(CRON_TEXT)
            )
            ledger.crons[cron["cron_id"]] = thread["thread_id"]
            ledger.outcomes[("create_cron", "ok")] += 1
    finally:
        await sdk.http.client.aclose()


async def disable_crons(url: str, key: str, ledger: Ledger) -> None:
    """Stop the crons firing before the checks (a PATCH each; the firings so far stay)."""
    sdk = get_client(url=url, api_key=key)
    try:
        for cron_id in ledger.crons:
            await sdk.crons.update(cron_id, enabled=False)
    finally:
        await sdk.http.client.aclose()
