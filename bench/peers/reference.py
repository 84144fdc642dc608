"""The reference server: ``langgraph dev`` (langgraph-cli's in-memory runtime) in a venv of its own.

The venv lives at ``bench/.peers-venv`` (git-ignored) and is created on first
use with ``python3 -m venv`` and ``pip install "langgraph-cli[inmem]"``; our
project's venv is never touched. The server runs in a temporary folder (it
keeps its in-memory state in ``.langgraph_api`` under its working directory)
from a ``langgraph.json`` that serves ``bench/peers/agent.py`` as ``echo``,
with tracing and analytics off and no LangSmith key, so nothing leaves the
machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import httpx

from tests.live.server import ROOT, free_port, wait_until_answers

VENV = ROOT / "bench" / ".peers-venv"
REQUIREMENT = "langgraph-cli[inmem]"
# Importing langgraph_api takes seconds on a loaded two-core machine; it answered /ok in 2 s unloaded.
START_SECONDS = 90
STOP_SECONDS = 15


def ensure_venv() -> Path:
    """Return the ``langgraph`` executable of the reference venv, installing it if missing."""
    langgraph = VENV / "bin" / "langgraph"
    if langgraph.exists():
        return langgraph
    print(f"installing the reference server into {VENV.relative_to(ROOT)} ({REQUIREMENT}) ...", flush=True)
    subprocess.run(["python3", "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(VENV / "bin" / "pip"), "install", "--quiet", REQUIREMENT], check=True)
    return langgraph


def installed_versions() -> dict[str, str]:
    """Return the versions of the reference's packages that matter to the comparison."""
    names = ["langgraph-cli", "langgraph-api", "langgraph-runtime-inmem", "langgraph", "langchain-core"]
    script = "import importlib.metadata as m, json, sys; print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))"
    out = subprocess.run([str(VENV / "bin" / "python"), "-c", script, *names], capture_output=True, text=True)
    return json.loads(out.stdout) if out.returncode == 0 else {}


class ReferenceServer:
    """One ``langgraph dev`` process serving ``graphs`` on a free loopback port."""

    def __init__(self, workdir: Path, graphs: dict[str, str]) -> None:
        self.workdir = workdir
        self.port = 0
        self.process: subprocess.Popen | None = None
        workdir.mkdir(parents=True, exist_ok=True)
        config = {"graphs": graphs, "dependencies": ["."]}
        (workdir / "langgraph.json").write_text(json.dumps(config))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in {"LANGSMITH_API_KEY", "LANGCHAIN_API_KEY"}}
        env.update(LANGSMITH_TRACING="false", LANGGRAPH_CLI_NO_ANALYTICS="1")
        return env

    def start(self, langgraph: Path) -> ReferenceServer:
        self.port = free_port()
        command = [str(langgraph), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1"]
        command += ["--port", str(self.port), "--n-jobs-per-worker", "10", "--config", "langgraph.json"]
        log = open(self.workdir / "langgraph-dev.log", "ab")
        # A session of its own, so that stop() reaches whatever the CLI spawns.
        self.process = subprocess.Popen(
            command, cwd=self.workdir, env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            wait_until_answers(
                self.process, f"{self.url}/ok", name="langgraph dev", log=self.log, seconds=START_SECONDS
            )
        except RuntimeError:
            self.stop()
            raise
        return self

    def info(self) -> dict:
        return httpx.get(f"{self.url}/info", timeout=10).json()

    def log(self) -> str:
        return (self.workdir / "langgraph-dev.log").read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        """SIGTERM the server's process group; SIGKILL it if it is still there after STOP_SECONDS."""
        if self.process is None:
            return
        self._signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.process.wait(timeout=STOP_SECONDS)
        self.process = None

    def _signal(self, sig: int) -> None:
        # start_new_session made the server the leader of a group whose id is its pid.
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass
