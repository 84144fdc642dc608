"""The servers under test (targets), started once for the whole bench and measured from /proc.

``sqlite-1``: one ``manage.py serve`` on SQLite with the memory stream bridge
and channel layer, no worker: ``make run``'s deployment. ``sqlite-2``,
``postgres-1``, ``postgres-2``: 1 or 2 servers and a run worker on the Redis
bridge and channel layer (``bench.load.cluster``'s configuration; the
servers execute what they admit). ``dev``: ``langgraph dev`` from
``bench/.peers-venv`` (``bench.peers.reference``), its in-memory runtime.
Every one serves ``bench/agents/agent.py`` as ``agent``.

Both sides are allowed the level's runs at once: ours through
``runs.capacity`` (default 32 a process; the rest would wait in the queue),
the reference through ``--n-jobs-per-worker`` (``bench.peers`` starts it
with 10).

A target also counts what its database wrote: rows in every table
(SQLite and PostgreSQL) and, on PostgreSQL, the database's transactions
and row writes (``pg_stat_database``).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench.agents.client import Server
from bench.load.cluster import (
    config_for,
    cpu_seconds,
    load_database,
    open_fds,
    postgres_backends,
    redis_pid,
    rss_kib,
)
from bench.peers.reference import ReferenceServer, ensure_venv, installed_versions
from tests.live.server import ROOT, LiveServer, WorkerProcess, free_port, wait_until_answers

AGENT = f"{ROOT / 'bench' / 'agents' / 'agent.py'}:graph"
GRAPH = "agent"
TARGETS = {
    "sqlite-1": "ours, SQLite, 1 process (memory bridge)",
    "sqlite-2": "ours, SQLite + Redis, 2 processes + worker",
    "postgres-1": "ours, PostgreSQL + Redis, 1 process + worker",
    "postgres-2": "ours, PostgreSQL + Redis, 2 processes + worker",
    "dev": "langgraph dev (in-memory runtime)",
}


def group_pids(leader: int) -> list[int]:
    """Pids of the processes in ``leader``'s process group (the reference and whatever it spawned)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[2]) == leader:
                pids.append(int(entry))
    return pids


@dataclass
class Target:
    name: str
    label: str
    servers: list[Server]
    pids: dict[str, int] = field(default_factory=dict)  # role -> pid: server0, server1, worker, redis
    leader: int | None = None  # the reference's process group
    sqlite_files: list[Path] = field(default_factory=list)
    database_url: str | None = None
    info: dict = field(default_factory=dict)

    @property
    def is_reference(self) -> bool:
        return self.leader is not None

    def server_pids(self) -> dict[str, int]:
        """The processes that serve and execute (ours: servers and worker; the reference: its group)."""
        if self.leader is not None:
            return {f"dev{i}": pid for i, pid in enumerate(sorted(group_pids(self.leader)))}
        return {role: pid for role, pid in self.pids.items() if role != "redis"}

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far: ``server`` (servers and worker, or the reference), ``redis``, ``postgres``."""
        out = {"server": sum(cpu_seconds(pid) or 0.0 for pid in self.server_pids().values())}
        if "redis" in self.pids:
            out["redis"] = cpu_seconds(self.pids["redis"]) or 0.0
        if self.database_url:
            dbname = self.database_url.rsplit("/", 1)[1]
            out["postgres"] = sum(cpu_seconds(pid) or 0.0 for pid in postgres_backends(dbname))
        return out

    def resources(self) -> dict[str, dict[str, int]]:
        """RSS (KiB) and open fds of each serving process now."""
        out = {}
        for role, pid in self.server_pids().items():
            with contextlib.suppress(OSError, RuntimeError):
                out[role] = {"rss_kib": rss_kib(pid), "fds": open_fds(pid)}
        return out

    def writes(self) -> dict[str, int]:
        """Rows in every table, and on PostgreSQL the database's commits and row writes so far."""
        if self.sqlite_files:
            rows = 0
            for path in self.sqlite_files:
                with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)) as conn:
                    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
                    rows += sum(conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in tables)
            return {"rows": rows}
        if self.database_url:
            import psycopg

            with psycopg.connect(self.database_url, autocommit=True) as conn:
                tables = conn.execute("SELECT schemaname, relname FROM pg_stat_user_tables ORDER BY 1, 2").fetchall()
                rows = sum(conn.execute(f'SELECT COUNT(*) FROM "{s}"."{t}"').fetchone()[0] for s, t in tables)
                commits, inserted, updated, deleted = conn.execute(
                    "SELECT xact_commit, tup_inserted, tup_updated, tup_deleted FROM pg_stat_database"
                    " WHERE datname = current_database()"
                ).fetchone()
            return {"rows": rows, "commits": commits, "row_writes": inserted + updated + deleted}
        return {}


class AgentsReference(ReferenceServer):
    """``langgraph dev`` as ``bench.peers`` starts it, allowed ``jobs`` runs at once instead of 10."""

    def __init__(self, workdir: Path, graphs: dict[str, str], jobs: int) -> None:
        super().__init__(workdir, graphs)
        self.jobs = jobs

    def start(self, langgraph: Path) -> AgentsReference:
        self.port = free_port()
        command = [str(langgraph), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1"]
        command += ["--port", str(self.port), "--n-jobs-per-worker", str(self.jobs), "--config", "langgraph.json"]
        log = open(self.workdir / "langgraph-dev.log", "ab")
        self.process = subprocess.Popen(
            command, cwd=self.workdir, env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            wait_until_answers(self.process, f"{self.url}/ok", name="langgraph dev", log=self.log, seconds=90)
        except RuntimeError:
            self.stop()
            raise
        return self


def _ours_config(*, capacity: int, redis_url: str | None, workdir: Path, overrides: dict) -> dict:
    if redis_url is None:
        config = {"graphs": {GRAPH: AGENT}, "runs": {"capacity": capacity}}
    else:
        config = config_for(workdir=workdir, redis_url=redis_url, execute_in_server=True)
        config["graphs"] = {GRAPH: AGENT}
        config["runs"]["capacity"] = capacity
    for dotted, value in overrides.items():
        *sections, key = dotted.split(".")
        node = config
        for section in sections:
            node = node.setdefault(section, {})
        node[key] = value
    return config


@contextlib.contextmanager
def running_target(
    name: str, workdir: Path, *, capacity: int, postgres_url: str, redis_url: str, overrides: dict | None = None
) -> Iterator[Target]:
    """Start target ``name`` (see TARGETS); stop it, and drop its database, on exit.

    ``overrides``: dotted ``config.yaml`` keys for ours (``thread_stream.flush_interval_ms`` …).
    """
    workdir.mkdir(parents=True)
    if name == "dev":
        reference = AgentsReference(workdir, {GRAPH: AGENT}, jobs=capacity).start(ensure_venv())
        try:
            assert reference.process is not None
            target = Target(name, TARGETS[name], [Server(reference.url, None)], leader=reference.process.pid)
            target.info = {"versions": installed_versions(), "info": reference.info()}
            yield target
        finally:
            reference.stop()
        return
    backend, processes = name.split("-")
    bridge_redis = None if name == "sqlite-1" else redis_url
    config = _ours_config(capacity=capacity, redis_url=bridge_redis, workdir=workdir, overrides=overrides or {})
    environ = {"REDIS_URL": redis_url} if bridge_redis else {}
    database = load_database(postgres_url, "agents_") if backend == "postgres" else contextlib.nullcontext()
    with database as database_url:
        started: list = []
        try:
            first = LiveServer(workdir / "s0", config=config, database_url=database_url, environ=environ).setup()
            api_key = first.api_key("alice")
            servers = [first] + [
                LiveServer(workdir / f"s{i}", config=config, database_url=database_url, environ=environ)
                for i in range(1, int(processes))
            ]
            for server in servers:
                started.append(server.start())
            pids = {f"server{i}": s.process.pid for i, s in enumerate(servers)}
            if bridge_redis:
                worker = WorkerProcess(
                    LiveServer(workdir / "w", config=config, database_url=database_url, environ=environ)
                ).start()
                started.append(worker)
                pids["worker"] = worker.process.pid
                if (pid := redis_pid(redis_url)) is not None:
                    pids["redis"] = pid
            sqlite_dir = Path(first.config["database"]["sqlite_dir"])
            target = Target(
                name,
                TARGETS[name],
                [Server(s.url, api_key) for s in servers],
                pids=pids,
                sqlite_files=[] if database_url else [sqlite_dir / "deerflow.db"],
                database_url=database_url,
            )
            yield target
        finally:
            for process in reversed(started):
                with contextlib.suppress(Exception):
                    process.stop()
