"""The engine Protocol and the server lifecycle, written once for every engine.

An engine adapter only knows how to build its launch command and how to read its failures.
`ServerProcess` owns the rest: a subprocess in its own session (so its own process group), bound
to 127.0.0.1 on a free port, its log kept in a file, readiness checked in four steps (process
alive, ``/health``, ``/v1/models``, one real 1-token request) under a timeout, and the whole
process group torn down on every exit path, Ctrl-C included. Processes are stopped by their
process group, never by name.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from probes.client import normalize_base_url
from probes.http import request
from probes.server_metrics import ServerSeries
from tuner.engines.lifetime import RUN_MARKER, die_with_parent_of, supervised

HOST = "127.0.0.1"


@dataclass(frozen=True)
class LaunchSpec:
    """What starts one server: an argv list (absolute paths) and the variables the config sets."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)

    @property
    def config_args(self) -> list[str]:
        """The configuration's own arguments: everything after ``--port P`` (the engine's
        contract, ``Engine.launch_spec``)."""
        return self.argv[self.argv.index("--port") + 2 :]

    def with_port(self, port: int) -> LaunchSpec:
        argv = list(self.argv)
        i = argv.index("--port")
        argv[i + 1] = str(port)
        return LaunchSpec(argv, dict(self.env))


class Engine(Protocol):
    """An inference server autotune can launch and tune."""

    name: str
    supports_ignore_eos: bool
    series: ServerSeries | None  # the Prometheus series its server exposes, if it has any
    # False: autotune starts nothing and attaches to a running server (--engine endpoint);
    # its launch_spec is never called
    launches: bool

    def version(self) -> str: ...

    def launch_spec(
        self, model_path: str, args: list[str], env: dict[str, str], port: int
    ) -> LaunchSpec:
        """The command that serves ``model_path`` on ``port`` with a configuration's
        ``args`` and ``env``. Its argv is the engine's command and fixed arguments, then
        ``--port P``, then ``args`` exactly as given and nothing after them: what follows
        ``--port P`` is the configuration's own (``LaunchSpec.config_args``, recorded as a
        trial's ``args``), and a restart moves the port in place (``with_port``)."""
        ...

    def classify_failure(self, log_tail: str, returncode: int | None) -> str: ...


class RunningServer(Protocol):
    """What measuring needs of a ready server, started here (ServerProcess) or attached to."""

    @property
    def base_url(self) -> str: ...

    @property
    def served_model(self) -> str | None: ...

    @property
    def startup_s(self) -> float | None: ...


class EngineStartError(RuntimeError):
    """The server did not become ready; ``reason`` is a short classification for the report."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}{': ' + detail if detail else ''}")
        self.reason = reason
        self.detail = detail


class EngineDied(EngineStartError):
    """A server that was ready exited while it was being measured (out of memory under load,
    a crash): the configuration failed; what it measured before stays in its record."""


def raise_if_died(server: RunningServer, when: str, failures: bool = True) -> None:
    """Raises EngineDied where a launched engine exited (waiting a second when requests failed:
    its supervisor reports the exit within a poll). An attached endpoint is not ours to watch."""
    died = getattr(server, "died", None)
    if died is not None and (exc := died(1.0 if failures else 0.0)) is not None:
        raise EngineDied(exc.reason, f"{exc.detail} {when}")


def match_failure(
    log_tail: str, rules: list[tuple[str, str]], clean: Callable[[str], str]
) -> str | None:
    """``reason (the last matching log line)`` for the first rule (regex, reason) that matches
    a line of the log, or None: the shared half of every adapter's ``classify_failure``."""
    for pattern, reason in rules:
        found = [ln for ln in log_tail.splitlines() if re.search(pattern, ln, re.IGNORECASE)]
        if found:
            return f"{reason} ({clean(found[-1])})"
    return None


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def tail(path: Path, n_bytes: int = 20_000) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n_bytes))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def check_ready(base_url: str, served_model: str | None, timeout_s: float = 60.0) -> str:
    """One pass of the readiness checks after /health; returns the served model name.

    Raises:
        OSError/ValueError: not ready yet (the caller retries).
    """
    status, body = request("GET", base_url + "/v1/models")
    names = [m["id"] for m in json.loads(body).get("data", [])] if status == 200 else []
    if names:
        name = str(served_model if served_model in names else names[0])
    elif served_model:
        # transformers serve lists the Hugging Face cache here, not the model it serves (and
        # answers 500 where that cache does not exist): the named model is asked for directly.
        name = served_model
    elif status != 200:
        raise ValueError(f"/v1/models answered {status}; give the served model's name")
    else:
        raise ValueError("/v1/models lists no model; give the served model's name")
    status, body = request(
        "POST",
        base_url + "/v1/completions",
        {"model": name, "prompt": "Hello", "max_tokens": 1, "temperature": 0.0},
        timeout_s,
    )
    if status != 200:
        raise ValueError(f"a 1-token completion answered {status}: {body[:200]!r}")
    return name


class ServerProcess:
    """One engine server as a context manager; ``__exit__`` always stops its process group.

    Args:
        spec: the launch command and its environment additions.
        log_path: where the server's stdout and stderr go.
        startup_timeout_s: the most a start may take, a hang included.
        classify: the engine's failure classifier.
        popen: the process factory (injectable for tests).
    """

    def __init__(
        self,
        spec: LaunchSpec,
        log_path: Path,
        *,
        startup_timeout_s: float = 300.0,
        classify: Callable[[str, int | None], str] = lambda log, rc: "failed to start",
        health_path: str = "/health",
        popen: Callable[..., subprocess.Popen] = subprocess.Popen,
        on_wait: Callable[[float], None] | None = None,
        run_id: str | None = None,
    ) -> None:
        self.spec = spec
        self.run_id = run_id
        self.log_path = log_path
        self.startup_timeout_s = startup_timeout_s
        self.classify = classify
        self.health_path = health_path
        self.popen = popen
        self.on_wait = on_wait
        self.proc: subprocess.Popen | None = None
        self.port = int(spec.argv[spec.argv.index("--port") + 1])
        self.base_url = normalize_base_url(f"http://{HOST}:{self.port}")
        self.served_model: str | None = None
        self.startup_s: float | None = None

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.spec.env}
        if self.run_id:
            env[RUN_MARKER] = self.run_id  # inherited by its children (tuner/engines/lifetime.py)
        with open(self.log_path, "ab") as log:
            log.write(f"$ {' '.join(self.spec.argv)}\n# env: {self.spec.env}\n".encode())
            log.flush()
            # start_new_session: the server and every child it spawns share a fresh process
            # group that we own, so teardown never has to find processes by name; the leader
            # dies with the tuner, even one killed by SIGKILL.
            if not os.access(self.spec.argv[0], os.X_OK) and not shutil.which(self.spec.argv[0]):
                raise EngineStartError(
                    "the engine program could not be run",
                    f"{self.spec.argv[0]}: not found or not executable",
                )
            try:
                self.proc = self.popen(
                    supervised(self.spec.argv),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    start_new_session=True,
                    preexec_fn=die_with_parent_of(os.getpid(), signal.SIGTERM),
                )
            except OSError as exc:  # the program is missing or not executable
                raise EngineStartError(
                    "the engine program could not be run",
                    f"{self.spec.argv[0]}: {exc.strerror or exc}",
                ) from None

    def wait_ready(self, served_model: str | None = None, poll_s: float = 1.0) -> float:
        """Block until the server answers a real request; return the start-up time in seconds.

        Raises:
            EngineStartError: the process died (with the engine's classification of its log),
                or it was not ready within the start-up timeout (a hang).
        """
        assert self.proc is not None, "start() first"
        t0 = time.monotonic()
        last = ""
        while True:
            waited = time.monotonic() - t0
            rc = self.proc.poll()
            if rc is not None:
                log = tail(self.log_path)
                raise EngineStartError(self.classify(log, rc), f"exit code {rc}")
            if waited > self.startup_timeout_s:
                raise EngineStartError(
                    "start-up timeout",
                    f"not ready after {self.startup_timeout_s:.0f} s (last check: {last})",
                )
            try:
                status, _ = request("GET", self.base_url + self.health_path, timeout_s=5.0)
                if status == 200:
                    self.served_model = check_ready(self.base_url, served_model)
                    self.startup_s = time.monotonic() - t0
                    return self.startup_s
                last = f"{self.health_path} answered {status}"
            except (OSError, ValueError, http.client.HTTPException) as exc:
                last = f"{type(exc).__name__}: {exc}"
            if self.on_wait:
                self.on_wait(waited)
            time.sleep(poll_s)

    def exit_code(self) -> int | None:
        """The server's exit code once it has exited (died under load, say); None while up."""
        return self.proc.poll() if self.proc is not None else None

    def died(self, wait_s: float = 0.0) -> EngineDied | None:
        """An EngineDied to raise if the server is gone, with the engine's reading of its log.
        ``wait_s``: how long to give an engine that may be on its way out (requests failed):
        its supervisor notices the engine's exit within a poll, not at once."""
        if wait_s > 0 and self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=wait_s)
        rc = self.exit_code()
        if rc is None:
            return None
        return EngineDied(self.classify(tail(self.log_path), rc), f"exit code {rc}")

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM the process group, then SIGKILL what is left after ``grace_s``."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        # start_new_session made the leader's pid the group id; ask no one else, since a leader
        # already reaped (it died at start-up) can no longer be looked up, its children can.
        pgid: int | None = proc.pid
        try:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pgid = None
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace_s)
            if pgid is not None:
                # Children (the engine core) may outlive the leader: sweep the group regardless.
                deadline = time.monotonic() + grace_s
                while _group_alive(pgid) and time.monotonic() < deadline:
                    time.sleep(0.2)
        finally:
            # Also when a second Ctrl-C or SIGTERM cuts the grace period short.
            if pgid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
