"""The soak's processes: a throwaway PostgreSQL database behind a cuttable proxy, a Redis of its own,
two server processes and a ``run_workers`` process, and the faults injected into them.

Everything listens on loopback. The servers and the worker reach PostgreSQL
through a ``TcpProxy`` (so the soak can cut the database for a few seconds)
and a Redis the soak started itself (so it can kill and restart it without
touching a Redis anyone else uses). The invariant checks read the database
directly, never through the proxy.
"""

from __future__ import annotations

import random
import signal
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import redis

from tests.live.proxy import TcpProxy
from tests.live.server import LiveServer, WorkerProcess, free_port

# Short leases and polls, so orphan recovery and cron firings happen inside a soak of a minute.
LEASE_SECONDS = 3
POLL_SECONDS = 0.25
REDIS_START_SECONDS = 20
FAULT_KINDS = ("kill_server", "kill_worker", "sigterm", "restart_redis", "cut_database")


class RedisServer:
    """A redis-server on a free loopback port, without persistence: a restart forgets everything."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.log = workdir / "redis.log"
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(command, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT)
        client = redis.Redis(port=self.port, socket_timeout=1)
        deadline = time.monotonic() + REDIS_START_SECONDS
        while True:
            try:
                if client.ping():
                    return
            except redis.RedisError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start: {self.log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None


@dataclass
class Fault:
    """One injected fault: what, on which process, from when until everything answered again."""

    kind: str
    target: str
    started: float
    ended: float = 0.0
    error: str = ""


@dataclass
class FaultLog:
    """The faults injected so far; requests overlapping a window (plus grace) failed "during a fault"."""

    grace: float = 1.0
    faults: list[Fault] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, fault: Fault) -> None:
        with self._lock:
            self.faults.append(fault)

    def overlaps(self, start: float, end: float) -> bool:
        with self._lock:
            return any(f.started <= end and start <= (f.ended or float("inf")) + self.grace for f in self.faults)


class Cluster:
    """The soak's database, Redis, proxy, two servers (A executes runs, B only admits) and one run worker.

    Server B runs with ``execute_in_server: false``, so its runs are executed
    by A or the worker: every run admitted through B crosses processes, and
    killing A or the worker leaves the other to claim its orphans.
    """

    def __init__(self, workdir: Path, base_url: str, *, mode: str = "full") -> None:
        self.workdir = workdir
        self.base_url = base_url
        self.mode = mode  # checkpoint_channel_mode of every process (frozen per process; all must agree)
        self.name = f"soak_{uuid.uuid4().hex[:10]}"
        self.database_url = urlunsplit(urlsplit(base_url)._replace(path=f"/{self.name}"))
        self.redis = RedisServer(workdir)
        self.proxy = TcpProxy(urlsplit(base_url).port or 5432)
        self.servers: dict[str, LiveServer] = {}
        self.worker: WorkerProcess | None = None
        self.key = ""

    def _admin(self) -> psycopg.Connection:
        return psycopg.connect(urlunsplit(urlsplit(self.base_url)._replace(path="/postgres")), autocommit=True)

    def _config(self, execute: bool) -> dict:
        return {
            "database": {"checkpoint_channel_mode": self.mode},
            "stream_bridge": {"type": "redis"},
            "channel_layer": {"type": "redis"},
            "redis": {"url": self.redis.url},
            "runs": {"lease_seconds": LEASE_SECONDS, "poll_seconds": POLL_SECONDS, "execute_in_server": execute},
        }

    def _process(self, name: str, execute: bool) -> LiveServer:
        parts = urlsplit(self.database_url)
        via_proxy = urlunsplit(parts._replace(netloc=f"{parts.username or 'postgres'}@127.0.0.1:{self.proxy.port}"))
        # REDIS_URL overrides redis.url: the environment must name the soak's own Redis, not the caller's.
        return LiveServer(
            self.workdir / name,
            config=self._config(execute),
            database_url=via_proxy,
            environ={"REDIS_URL": self.redis.url},
        )

    def __enter__(self) -> Cluster:
        with self._admin() as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')
        try:
            self.redis.start()
            self.proxy.__enter__()
            maker = LiveServer(self.workdir / "migrate", database_url=self.database_url).setup()
            self.key = maker.api_key("soak")
            self.servers = {"A": self._process("A", True), "B": self._process("B", False)}
            self.worker = WorkerProcess(self._process("W", True))
            # Three Python processes importing Django and LangGraph: side by side, they start in the time of one.
            with ThreadPoolExecutor(3) as pool:
                for started in [pool.submit(p.start) for p in (*self.servers.values(), self.worker)]:
                    started.result()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for server in self.servers.values():
            if server.process is not None:
                server.kill()
        if self.worker is not None and self.worker.process is not None:
            self.worker.kill()
        self.proxy.__exit__()
        self.redis.kill()
        with self._admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')

    @property
    def urls(self) -> list[str]:
        return [server.url for server in self.servers.values()]

    def connect(self) -> psycopg.Connection:
        """A direct connection to the soak's database (not through the proxy), for the checks."""
        return psycopg.connect(self.database_url, autocommit=True)

    def inject(self, kind: str, rng: random.Random, log: FaultLog) -> Fault:
        """Inject one fault and undo it (restart, restore); return it once everything answers again.

        The fault is in ``log`` from the moment it starts, so a request failing
        meanwhile is counted as failed during a fault.
        """
        fault = Fault(kind, "", time.monotonic())
        log.add(fault)
        try:
            if kind == "kill_server":
                fault.target = rng.choice(sorted(self.servers))
                self.servers[fault.target].kill()
                self.servers[fault.target].start()
            elif kind == "kill_worker":
                fault.target = "worker"
                self.worker.kill()
                self.worker.start()
            elif kind == "sigterm":
                fault.target = rng.choice([*sorted(self.servers), "worker"])
                self._sigterm(fault.target)
            elif kind == "restart_redis":
                fault.target = "redis"
                self.redis.kill()
                self.redis.start()
            elif kind == "cut_database":
                fault.target = "postgres"
                self.proxy.cut()
                time.sleep(rng.uniform(2, 4))  # the outage itself: how long the database is away
                self.proxy.restore()
            else:
                raise ValueError(f"unknown fault {kind!r}")
        except Exception as exc:  # a process that would not stop or start: a violation, reported with the fault
            fault.error = f"{type(exc).__name__}: {exc}"[:500]
        fault.ended = time.monotonic()
        return fault

    def _sigterm(self, target: str) -> None:
        """Stop a process gracefully and start it again; one still running after 15 s is killed, then raises."""
        process = self.worker if target == "worker" else self.servers[target]
        try:
            process.stop() if target == "worker" else process.stop(signal.SIGTERM)
        except subprocess.TimeoutExpired:
            process.kill()
            process.start()
            raise
        process.start()
