"""One configuration's processes: a fresh database, 1 or 2 server processes and one run worker.

Every process uses the Redis stream bridge and channel layer, with one
process as with two: a run worker sits beside the servers in every
configuration, and a run it claims must reach a stream served elsewhere.
The servers execute what they admit (``runs.execute_in_server: true``, the
default): admission dispatches the run on the admitting server's own loop at
once, so adding a server adds an event loop that executes LangGraph work,
which is what the 1-vs-2-process comparison is about. The worker then only
claims what a server did not start (its poll), fires crons and reconciles
orphans. ``--execute worker`` turns it around (servers admit and stream, the
worker executes everything); one worker loop is then the ceiling whatever
the number of servers.

Also here: reading a process's CPU seconds, RSS and open descriptors from
/proc, and finding the PostgreSQL backends that serve this database.
"""

from __future__ import annotations

import os
import shutil
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from tests.live.server import LiveServer, WorkerProcess

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# Run streams expire from Redis well after a benchmark, instead of the production day.
STREAM_TTL_SECONDS = 900


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` (None once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, all cores, every process (/proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:8]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields) - idle) / CLOCK_TICKS, sum(fields) / CLOCK_TICKS


def postgres_backends(dbname: str) -> list[int]:
    """Pids of the PostgreSQL backends connected to ``dbname`` (their process titles name it)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            title = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if title.startswith("postgres: ") and f" {dbname} " in title:
            pids.append(int(entry))
    return pids


def redis_pid(redis_url: str) -> int | None:
    """The Redis server's pid when it runs on this machine, else None."""
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        pid = int(client.info("server")["process_id"])
    finally:
        client.close()
    return pid if Path(f"/proc/{pid}").exists() else None


@contextmanager
def load_database(base_url: str, prefix: str):
    """A new empty PostgreSQL database ``<prefix><random>`` next to ``base_url``'s, dropped afterwards."""
    import psycopg

    name = f"{prefix}{uuid.uuid4().hex[:10]}"
    admin = urlunsplit(urlsplit(base_url)._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(base_url)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class Cluster:
    """The running processes of one configuration."""

    backend: str
    servers: list[LiveServer]
    worker: WorkerProcess
    api_key: str
    database_url: str | None
    redis_url: str
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def urls(self) -> list[str]:
        return [server.url for server in self.servers]

    @property
    def dbname(self) -> str | None:
        return urlsplit(self.database_url).path[1:] if self.database_url else None

    def cpu_snapshot(self) -> dict[str, float]:
        """CPU seconds so far per role: each server, the worker, Redis and PostgreSQL (all our backends)."""
        snapshot = {role: cpu_seconds(pid) or 0.0 for role, pid in self.pids.items()}
        if self.dbname:
            snapshot["postgres"] = sum(cpu_seconds(pid) or 0.0 for pid in postgres_backends(self.dbname))
        return snapshot


def config_for(*, workdir: Path, redis_url: str, execute_in_server: bool) -> dict:
    return {
        "database": {"backend": "sqlite", "sqlite_dir": str(workdir / "data")},
        "stream_bridge": {"type": "redis", "stream_ttl_seconds": STREAM_TTL_SECONDS},
        "channel_layer": {"type": "redis"},
        "redis": {"url": redis_url},
        "runs": {"execute_in_server": execute_in_server},
    }


@contextmanager
def running_cluster(
    *,
    backend: str,
    processes: int,
    workdir: Path,
    postgres_url: str,
    redis_url: str,
    execute_in_server: bool,
    prefix: str = "load_",
):
    """Start ``processes`` servers and one run worker on a fresh database; stop them all on exit."""
    workdir.mkdir(parents=True)
    config = config_for(workdir=workdir, redis_url=redis_url, execute_in_server=execute_in_server)
    environ = {"REDIS_URL": redis_url}
    with load_database(postgres_url, prefix) if backend == "postgres" else _no_database() as database_url:
        started: list = []
        try:
            first = LiveServer(workdir / "s0", config=config, database_url=database_url, environ=environ).setup()
            api_key = first.api_key("alice")
            servers = [first] + [
                LiveServer(workdir / f"s{i}", config=config, database_url=database_url, environ=environ)
                for i in range(1, processes)
            ]
            for server in servers:
                started.append(server.start())
            worker = WorkerProcess(
                LiveServer(workdir / "w", config=config, database_url=database_url, environ=environ)
            ).start()
            started.append(worker)
            pids = {f"server{i}": s.process.pid for i, s in enumerate(servers)}
            pids["worker"] = worker.process.pid
            if (pid := redis_pid(redis_url)) is not None:
                pids["redis"] = pid
            yield Cluster(backend, servers, worker, api_key, database_url, redis_url, pids)
        finally:
            for process in reversed(started):
                process.stop()
            shutil.rmtree(workdir, ignore_errors=True)


@contextmanager
def _no_database():
    yield None
