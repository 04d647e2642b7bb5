"""The endpoint "engine": a server someone else runs, reached at its root URL.

Nothing is launched and nothing of the server is configured: autotune attaches to it, checks
that it answers a real request (which also warms a server that has not yet served anything),
asks once whether it takes ``ignore_eos``, and then only the client-side load is searched. The
report says so, and has no launch command.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from probes.client import normalize_base_url
from probes.http import request
from probes.server_metrics import ServerSeries
from tuner.engines.base import LaunchSpec, check_ready
from tuner.engines.vllm import VLLM_SERIES


class EndpointError(RuntimeError):
    """The endpoint cannot be used (not answering, or not serving the named model)."""


@dataclass
class AttachedServer:
    """What the runner needs of a server it did not start (ServerProcess's reading side)."""

    base_url: str
    served_model: str
    ignore_eos: bool
    startup_s: float = 0.0
    root: str | None = None  # the model folder it reports in /v1/models (vLLM's ``root``)

    @property
    def local_root(self) -> str | None:
        """``root`` where it is a folder on this machine (the server may run elsewhere)."""
        return self.root if self.root and Path(self.root).is_dir() else None


def attach(endpoint: str, served_model: str | None, timeout_s: float = 120.0) -> AttachedServer:
    """Check a running server and learn what it takes.

    Raises:
        EndpointError: it does not answer a 1-token completion, or serves another model.
    """
    try:
        url = normalize_base_url(endpoint)
    except ValueError as exc:
        raise EndpointError(f"{exc} (such as http://127.0.0.1:8000)") from None
    try:
        name = check_ready(url, served_model, timeout_s=timeout_s)
    except Exception as exc:
        raise EndpointError(f"endpoint {url} is not answering: {exc}") from None
    if served_model and name != served_model:
        raise EndpointError(f"{url} does not serve {served_model!r} (it serves {name!r})")
    # vLLM takes ignore_eos; servers that refuse unknown fields (transformers serve) answer 4xx.
    status, _ = request(
        "POST",
        url + "/v1/completions",
        {"model": name, "prompt": "Hi", "max_tokens": 1, "ignore_eos": True},
        timeout_s,
    )
    return AttachedServer(
        base_url=url, served_model=name, ignore_eos=status == 200, root=model_root(url, name)
    )


def model_root(url: str, name: str) -> str | None:
    """Where the server says the model it serves as ``name`` comes from (vLLM lists a model's
    folder or hub id as ``root`` in /v1/models), or None."""
    try:
        status, body = request("GET", url + "/v1/models")
        models = json.loads(body).get("data", []) if status == 200 else []
    except (OSError, ValueError, AttributeError):
        return None
    for m in models:
        if isinstance(m, dict) and m.get("id") == name and isinstance(m.get("root"), str):
            return str(m["root"])
    return None


class EndpointEngine:
    name = "endpoint"
    launches = False
    supports_ignore_eos = False  # learnt per server by attach()
    # vLLM's series, read where the server has them (a vLLM endpoint); ignored where it has not
    series: ServerSeries | None = VLLM_SERIES

    def version(self) -> str:
        return "external server"

    def launch_spec(
        self, model_path: str, args: list[str], env: dict[str, str], port: int
    ) -> LaunchSpec:
        raise EndpointError("an endpoint is not launched by autotune")

    def classify_failure(self, log_tail: str, returncode: int | None) -> str:
        return "the endpoint stopped answering"
