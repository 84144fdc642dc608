"""The clients: N official ``langgraph_sdk`` clients on one event loop, each looping a seeded mix.

Each client owns a thread (a new one every ``ROTATE_RUNS`` runs, so state and
history reads see a bounded thread whatever the throughput) and picks its
next operation from ``MIX`` with its own ``random.Random(seed + index)``: the
same seed gives every configuration the same sequence per client. Client
``i`` talks to server ``i % len(urls)``. Every answer is checked (the echo
came back, the stream carried it); a failed check or an exception counts as
an error of that operation, with its message kept.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from dataclasses import dataclass, field

from langgraph_sdk import get_client

# Operation -> weight in the mixed workload.
MIX = {
    "runs.wait": 25,
    "runs.stream values": 15,
    "runs.stream messages-tuple": 15,
    "threads.stream (v2, SSE)": 15,
    "threads.get_state": 20,
    "threads.get_history(10)": 10,
}
ROTATE_RUNS = 20
TIMEOUT_SECONDS = 120


def human(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


@dataclass
class Samples:
    """Latencies (seconds) of successful operations and error messages, per operation."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, Counter] = field(default_factory=dict)

    def ok(self, op: str, seconds: float) -> None:
        self.latencies.setdefault(op, []).append(seconds)

    def failed(self, op: str, message: str) -> None:
        self.errors.setdefault(op, Counter())[message[:200]] += 1

    @property
    def ops(self) -> int:
        return sum(map(len, self.latencies.values()))

    @property
    def error_count(self) -> int:
        return sum(sum(c.values()) for c in self.errors.values())


class Budget:
    """When a client's phase ends: after ``seconds``, or once it started ``ops`` operations."""

    def __init__(self, *, seconds: float | None, ops: int | None) -> None:
        self.deadline = time.monotonic() + seconds if seconds else None
        self.remaining = ops

    def take(self) -> bool:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return False
        if self.remaining is not None:
            if self.remaining <= 0:
                return False
            self.remaining -= 1
        return True


class LoadClient:
    """One SDK client with its own thread and its own random sequence."""

    def __init__(self, index: int, url: str, api_key: str, seed: int) -> None:
        self.index = index
        self.client = get_client(url=url, api_key=api_key, timeout=TIMEOUT_SECONDS)
        self.headers = {"x-api-key": api_key}
        self.random = random.Random(seed + index)
        self.thread_id: str | None = None
        self.runs_on_thread = 0
        self.turn = 0

    async def ensure_thread(self, samples: Samples) -> None:
        if self.thread_id is not None and self.runs_on_thread < ROTATE_RUNS:
            return
        started = time.perf_counter()
        self.thread_id = (await self.client.threads.create())["thread_id"]
        samples.ok("threads.create", time.perf_counter() - started)
        self.runs_on_thread = 0

    def next_text(self) -> str:
        self.turn += 1
        return f"client {self.index} turn {self.turn}"

    async def run_op(self, op: str, samples: Samples) -> None:
        try:
            await self.ensure_thread(samples)
        except Exception as exc:  # noqa: BLE001 - counted, the loop goes on
            samples.failed("threads.create", f"{type(exc).__name__}: {exc}")
            return
        started = time.perf_counter()
        try:
            await OPERATIONS[op](self)
        except Exception as exc:  # noqa: BLE001 - counted, the loop goes on
            samples.failed(op, f"{type(exc).__name__}: {exc}")
        else:
            samples.ok(op, time.perf_counter() - started)

    async def wait(self) -> None:
        text = self.next_text()
        self.runs_on_thread += 1
        values = await self.client.runs.wait(self.thread_id, "lead_agent", input=human(text))
        _expect(values["messages"][-1]["content"], f"echo: {text}")

    async def stream_values(self) -> None:
        text = self.next_text()
        self.runs_on_thread += 1
        last = None
        async for part in self.client.runs.stream(
            self.thread_id, "lead_agent", input=human(text), stream_mode="values"
        ):
            if part.event == "error":
                raise RuntimeError(f"error frame: {part.data}")
            if part.event == "values":
                last = part.data
        _expect(last and last["messages"][-1]["content"], f"echo: {text}")

    async def stream_messages(self) -> None:
        text = self.next_text()
        self.runs_on_thread += 1
        tokens = []
        async for part in self.client.runs.stream(
            self.thread_id, "lead_agent", input=human(text), stream_mode="messages-tuple"
        ):
            if part.event == "error":
                raise RuntimeError(f"error frame: {part.data}")
            if part.event == "messages":
                tokens.append(part.data[0]["content"])
        _expect("".join(tokens), f"echo: {text}")

    async def thread_stream(self) -> None:
        text = self.next_text()
        self.runs_on_thread += 1
        async with self.client.threads.stream(
            self.thread_id, assistant_id="lead_agent", headers=self.headers
        ) as thread:
            await thread.run.start(input=human(text))
            # Read to the run's end first: on a thread given by id, ``thread.output`` alone may answer the
            # state from before the run (the SDK's fast path for reattaching to a finished thread). The
            # messages are collected before their text is read: reading a text inside the iteration stalls it.
            messages = [message async for message in thread.messages]
            replies = ["".join([token async for token in message.text]) for message in messages]
            output = await thread.output
        _expect(replies[-1:], [f"echo: {text}"])
        _expect(output["messages"][-1]["content"], f"echo: {text}")

    async def get_state(self) -> None:
        state = await self.client.threads.get_state(self.thread_id)
        if "values" not in state:
            raise RuntimeError(f"no values in the state: {sorted(state)}")

    async def get_history(self) -> None:
        history = await self.client.threads.get_history(self.thread_id, limit=10)
        if not isinstance(history, list) or len(history) > 10:
            raise RuntimeError(f"history of {len(history)} entries for limit 10")


OPERATIONS = {
    "runs.wait": LoadClient.wait,
    "runs.stream values": LoadClient.stream_values,
    "runs.stream messages-tuple": LoadClient.stream_messages,
    "threads.stream (v2, SSE)": LoadClient.thread_stream,
    "threads.get_state": LoadClient.get_state,
    "threads.get_history(10)": LoadClient.get_history,
}
STREAMS = ("runs.stream values", "runs.stream messages-tuple", "threads.stream (v2, SSE)")


def _expect(got, wanted) -> None:
    if got != wanted:
        raise RuntimeError(f"expected {wanted!r}, got {got!r}")


async def drive(
    clients: list[LoadClient], *, mix: dict[str, int], seconds: float | None, ops: int | None
) -> tuple[Samples, float]:
    """Loop every client over ``mix`` until the budget is spent; return the samples and the wall seconds.

    ``ops`` is shared out: each client does its part, so with the same seed
    every configuration runs exactly the same operations.
    """
    samples = Samples()
    share = -(-ops // len(clients)) if ops else None
    names, weights = list(mix), list(mix.values())

    async def loop(client: LoadClient) -> None:
        budget = Budget(seconds=seconds, ops=share)
        while budget.take():
            await client.run_op(client.random.choices(names, weights)[0], samples)

    started = time.monotonic()
    await asyncio.gather(*(loop(c) for c in clients))
    return samples, time.monotonic() - started


async def drive_streams(clients: list[LoadClient], total: int, on_progress) -> Samples:
    """Run ``total`` streams (the three kinds in turn) over ``clients``; call ``on_progress(done)`` as they end."""
    samples = Samples()
    counter = iter(range(total))
    done = 0

    async def loop(client: LoadClient) -> None:
        nonlocal done
        for n in counter:
            await client.run_op(STREAMS[n % len(STREAMS)], samples)
            done += 1
            on_progress(done)

    await asyncio.gather(*(loop(c) for c in clients))
    return samples
