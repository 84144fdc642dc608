"""Real server processes for tests: `manage.py serve` (uvicorn) serving deerflow_site.asgi, as `make run` does."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager, nullcontext
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[2]
# The browser the console and useStream tests drive (Debian's chromium; .ci/run installs it).
CHROMIUM = Path("/usr/bin/chromium")
# Root (CI) needs --no-sandbox; containers often have a tiny /dev/shm.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-dev-shm-usage"]
PYTHON = sys.executable
# How long a starting server may take to answer /ok: imports alone take seconds on a loaded two-core machine.
START_SECONDS = 90


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_answers(process: subprocess.Popen, url: str, *, name: str, log, seconds: float = START_SECONDS) -> None:
    """Poll ``url`` until it answers 200; raise with the server's ``log()`` if it exits or the time runs out."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}: {log()}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{name} did not answer {url} in {seconds:.0f} s: {log()}")


# Users every migrated template already holds, with an API key each.
TEMPLATE_USERS = ("alice", "bob")


class _Template:
    """A database migrated once per test process, copied for each server that would migrate its own.

    ``manage.py migrate`` and ``create_api_key`` are a Python process each
    (seconds on a loaded two-core machine), and most live tests start a server
    on a fresh database: a copy of a migrated file (SQLite) or ``CREATE
    DATABASE … TEMPLATE`` (PostgreSQL) gives the same tables, rows and keys in
    milliseconds. Migrations themselves still run: here once, and in the
    in-process suite.
    """

    def __init__(self, database_url: str | None) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="deerflow-template-"))
        atexit.register(shutil.rmtree, self.workdir, ignore_errors=True)
        self.database_url = database_url
        maker = LiveServer(self.workdir, database_url=database_url)
        maker.manage("migrate", "--noinput")
        self.keys = {user: maker.api_key(user) for user in TEMPLATE_USERS}
        self.sqlite_file = self.workdir / "data" / "deerflow.db"


_templates: dict[str, _Template] = {}  # "sqlite", or "pg:<base url>"
_from_template: dict[str, _Template] = {}  # PostgreSQL database name -> the template it was created from


def _sqlite_template() -> _Template:
    if "sqlite" not in _templates:
        _templates["sqlite"] = _Template(None)
    return _templates["sqlite"]


def _admin_url(base_url: str) -> str:
    return urlunsplit(urlsplit(base_url)._replace(path="/postgres"))


def _postgres_template(base_url: str) -> _Template:
    """A migrated database next to ``base_url``'s, dropped when the test process exits."""
    import psycopg

    key = f"pg:{base_url}"
    if key not in _templates:
        name = f"deerflow_template_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(_admin_url(base_url), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        atexit.register(_drop_database, base_url, name)
        _templates[key] = _Template(urlunsplit(urlsplit(base_url)._replace(path=f"/{name}")))
    return _templates[key]


def _drop_database(base_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(_admin_url(base_url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def project_server(workdir: Path, langgraph_json: Path):
    """A real server serving a ``langgraph.json`` project on this pass's backend (a fresh PostgreSQL
    database when ``DATABASE_URL`` is set, else SQLite); stopped, and its database dropped, afterwards."""
    base = os.environ.get("DATABASE_URL")
    with fresh_postgres_database(base) if base else nullcontext() as url:
        live = LiveServer(workdir, config={"langgraph_json": str(langgraph_json)}, database_url=url).setup().start()
        try:
            yield live
        finally:
            live.stop()


@contextmanager
def fresh_postgres_database(base_url: str, *, migrated: bool = True):
    """Create a throwaway database next to ``base_url``'s (migrated, or empty) and drop it afterwards."""
    import psycopg

    template = _postgres_template(base_url) if migrated else None
    name = f"deerflow_live_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_admin_url(base_url), autocommit=True) as conn:
        if template is None:
            conn.execute(f'CREATE DATABASE "{name}"')
        else:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{urlsplit(template.database_url).path[1:]}"')
            _from_template[name] = template
    try:
        yield urlunsplit(urlsplit(base_url)._replace(path=f"/{name}"))
    finally:
        _from_template.pop(name, None)
        _drop_database(base_url, name)


class LiveServer:
    """One server process (``manage.py serve``) with its own config, data folder and API keys."""

    def __init__(
        self,
        workdir: Path,
        *,
        config: dict | None = None,
        database_url: str | None = None,
        environ: dict[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.database_url = database_url
        self.environ = environ or {}
        self.config = {"database": {"backend": "sqlite", "sqlite_dir": str(workdir / "data")}, **(config or {})}
        if config and "database" in config:
            self.config["database"] = {"backend": "sqlite", "sqlite_dir": str(workdir / "data"), **config["database"]}
        self.port = 0
        self.process: subprocess.Popen | None = None
        self.keys: dict[str, str] = {}
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "config.yaml").write_text(yaml.safe_dump(self.config))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
        env.update(DEERFLOW_CONFIG=str(self.workdir / "config.yaml"), DEERFLOW_VAR_DIR=str(self.workdir / "var"))
        if self.database_url:
            env["DATABASE_URL"] = self.database_url
        env.update(self.environ)
        return env

    def manage(self, *args: str) -> str:
        result = subprocess.run(
            [PYTHON, "manage.py", *args], cwd=ROOT, env=self.env(), capture_output=True, text=True, timeout=120
        )
        if result.returncode:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
        return result.stdout

    def api_key(self, username: str) -> str:
        if username not in self.keys:
            self.keys[username] = self.manage("create_api_key", username).strip().splitlines()[-1]
        return self.keys[username]

    def setup(self) -> LiveServer:
        """Give the server a migrated database holding TEMPLATE_USERS' keys (a template's copy when one fits)."""
        template = None
        if self.database_url:
            template = _from_template.get(urlsplit(self.database_url).path[1:])
        elif self.config["database"].get("backend") == "sqlite":
            target = Path(self.config["database"]["sqlite_dir"]) / "deerflow.db"
            if not target.exists():
                template = _sqlite_template()
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(template.sqlite_file, target)
        if template is None:
            self.manage("migrate", "--noinput")
        else:
            self.keys.update(template.keys)
        return self

    def start(self, port: int | None = None) -> LiveServer:
        self.port = port or self.port or free_port()
        log = open(self.workdir / f"server-{self.port}.log", "ab")
        self.process = subprocess.Popen(
            [PYTHON, "manage.py", "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            cwd=ROOT,
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        wait_until_answers(self.process, f"{self.url}/ok", name="server", log=self.log)
        return self

    def log(self) -> str:
        return (self.workdir / f"server-{self.port}.log").read_text(errors="replace")[-4000:]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> int:
        """Stop the process; return its exit code (raises if it hangs)."""
        assert self.process is not None
        self.process.send_signal(sig)
        code = self.process.wait(timeout=timeout)
        self.process = None
        return code

    def kill(self) -> None:
        self.stop(signal.SIGKILL)


@contextmanager
def serving(workdir: Path, backend: str, *, postgres_base: str | None = None):
    """Yield a started LiveServer on SQLite, or on a fresh PostgreSQL database next to ``postgres_base``; stop it after."""
    with fresh_postgres_database(postgres_base) if backend == "postgres" else nullcontext(None) as database_url:
        server = LiveServer(workdir / backend, database_url=database_url).setup().start()
        try:
            yield server
        finally:
            server.stop()


class WorkerProcess:
    """A `manage.py run_workers` process sharing a LiveServer's configuration and database."""

    def __init__(self, server: LiveServer) -> None:
        self.server = server
        self.process: subprocess.Popen | None = None

    def start(self) -> WorkerProcess:
        path = self.server.workdir / "worker.log"
        # The log is appended to across restarts: only what this process writes says it is ready.
        before = path.stat().st_size if path.exists() else 0
        log = open(path, "ab")
        self.process = subprocess.Popen(
            [PYTHON, "manage.py", "run_workers"], cwd=ROOT, env=self.server.env(), stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + START_SECONDS
        while "claiming runs" not in path.read_bytes()[before:].decode(errors="replace"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(path.read_text(errors="replace")[-4000:])
            time.sleep(0.1)
        return self

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=15)
        self.process = None

    def stop(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=15)


def server_query(server: LiveServer, sql: str) -> list[tuple]:
    """Run ``sql`` on the server's own database (its SQLite file, or its PostgreSQL URL) and return the rows."""
    if server.database_url is None:
        import sqlite3

        with sqlite3.connect(Path(server.config["database"]["sqlite_dir"]) / "deerflow.db") as conn:
            return conn.execute(sql).fetchall()
    import psycopg

    with psycopg.connect(server.database_url) as conn:
        return conn.execute(sql).fetchall()
