"""A small OpenAI-compatible streaming server for tests (GuideLLM's mock server, in miniature).

Routes: ``/health``, ``/v1/models``, ``/v1/completions``, ``/v1/chat/completions`` (streamed
or not) and ``/metrics`` (a few ``vllm:*`` Prometheus lines). Knobs:

- ``ttft_ms``: delay before the first content chunk; ``itl_ms``: delay between content chunks;
- ``max_concurrent``: requests served at once (a semaphore; the rest wait, like a batch limit);
- ``send_usage``: whether the usage chunk is sent when the client asks for it;
- ``quality_loss``: nats added to every prompt token's negative log-probability (a worse
  "quantised" model: perplexity x e^loss), for ``prompt_logprobs``;
- ``spec_tokens``: speculative decoding with this many drafted tokens per step (0: off): the
  ``vllm:spec_decode_*`` counters grow (half of the drafted tokens accepted), and with
  ``diverge_at`` >= 0 the greedy output differs from the plain one at that position.

Output token i of every answer is the word ``tok{i}`` with token id i (``return_token_ids``);
``logprobs: 2`` gives the top two per position, 1 nat apart.

Faults on cue (each off by default): ``die_after`` N requests the process exits (an engine that
dies mid-measurement); ``die_above`` C requests in flight it exits with 137 (memory running out
once the load grows); every ``error_every``-th request gets HTTP 500; every ``break_every``-th
stream is cut after its first token; every ``hang_every``-th request never answers.

A prompt that starts with ``FAIL`` is answered with HTTP 500; one that starts with ``SLOW`` gets
its first token ``slow_ms`` later than the others (a request over a latency limit, on cue).
Prompt tokens are counted as whitespace-separated words, so tests can predict
``usage.prompt_tokens``; output tokens are ``max_tokens`` chunks of one word each.

In-process use (its own event loop in a background thread)::

    with FakeOpenAIServer(ttft_ms=5, itl_ms=1) as srv:
        srv.base_url, srv.stats.max_in_flight

Script use (how ServerProcess starts an engine)::

    python tests/fakes/openai_server.py --port P --ttft-ms 5 --itl-ms 1 [--fail-start]
        [--spawn-child] [--child-ignores-sigterm] [any vLLM-style argument, ignored]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

DEFAULT_MODEL = "fake-model"
FAIL_START_MESSAGE = (
    "ValueError: Available memory on node 0 (6.37/7.84 GiB) on startup is less than desired "
    "CPU memory utilization"
)


@dataclass
class Stats:
    """What the server saw; read from the test thread (plain ints and lists)."""

    n_requests: int = 0
    n_tokens: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    running: int = 0
    max_running: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)


def _prompt_tokens(body: dict[str, Any], chat: bool) -> int:
    if chat:
        return sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
    return len(str(body.get("prompt", "")).split())


def _first_text(body: dict[str, Any], chat: bool) -> str:
    if chat:
        msgs = body.get("messages") or [{}]
        return str(msgs[-1].get("content", ""))
    return str(body.get("prompt", ""))


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def build_app(
    *,
    model: str = DEFAULT_MODEL,
    root: str | None = None,
    ttft_ms: float = 5.0,
    itl_ms: float = 1.0,
    max_concurrent: int = 64,
    send_usage: bool = True,
    stats: Stats | None = None,
    reject_fields: tuple[str, ...] = (),
    quality_loss: float = 0.0,
    spec_tokens: int = 0,
    diverge_at: int = -1,
    die_after: int = 0,
    die_above: int = 0,
    error_every: int = 0,
    break_every: int = 0,
    hang_every: int = 0,
    slow_ms: float = 0.0,
    long_itl_ms: float | None = None,
    long_above: int = 16,
) -> web.Application:
    """The aiohttp application; ``stats`` is filled in as requests arrive."""
    st = stats if stats is not None else Stats()
    sem: asyncio.Semaphore | None = None

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="")

    async def models(_: web.Request) -> web.Response:
        listed = {"id": model, "object": "model", "root": root or model}  # as vLLM lists it
        return web.json_response({"object": "list", "data": [listed]})

    async def metrics(_: web.Request) -> web.Response:
        drafts = st.n_tokens // 2 if spec_tokens else 0
        spec = (
            (
                "# TYPE vllm:spec_decode_num_drafts counter\n"
                f'vllm:spec_decode_num_drafts_total{{model_name="{model}"}} {drafts}\n'
                "# TYPE vllm:spec_decode_num_draft_tokens counter\n"
                f'vllm:spec_decode_num_draft_tokens_total{{model_name="{model}"}} '
                f"{drafts * spec_tokens}\n"
                "# TYPE vllm:spec_decode_num_accepted_tokens counter\n"
                f'vllm:spec_decode_num_accepted_tokens_total{{model_name="{model}"}} '
                f"{drafts * spec_tokens / 2}\n"
            )
            if spec_tokens
            else ""
        )
        text = spec + (
            "# HELP vllm:num_requests_running Requests running.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{model_name="{model}"}} {st.running}\n'
            "# HELP vllm:kv_cache_usage_perc KV cache usage.\n"
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            f'vllm:kv_cache_usage_perc{{model_name="{model}"}} 0.25\n'
            "# HELP vllm:request_prefill_time_seconds Prefill time.\n"
            "# TYPE vllm:request_prefill_time_seconds histogram\n"
            f'vllm:request_prefill_time_seconds_sum{{model_name="{model}"}} '
            f"{st.n_requests * ttft_ms / 1000.0}\n"
            f'vllm:request_prefill_time_seconds_count{{model_name="{model}"}} {st.n_requests}\n'
        )
        return web.Response(text=text, content_type="text/plain")

    async def generate(request: web.Request, chat: bool) -> web.StreamResponse:
        nonlocal sem
        if sem is None:  # created on the server's own loop
            sem = asyncio.Semaphore(max_concurrent)
        body = await request.json()
        st.n_requests += 1
        st.bodies.append(body)
        st.in_flight += 1
        st.max_in_flight = max(st.max_in_flight, st.in_flight)
        k = st.n_requests
        if (die_after and k > die_after) or (die_above and st.in_flight > die_above):
            print(f"fake engine: exiting at request {k} ({st.in_flight} in flight)", flush=True)
            os._exit(137 if die_above else 3)
        try:
            if error_every and k % error_every == 0:
                return web.json_response({"error": {"message": "injected 500"}}, status=500)
            if hang_every and k % hang_every == 0:
                await asyncio.sleep(3600)
            if bad := [f for f in reject_fields if f in body]:  # like transformers serve
                return web.json_response(
                    {"error": {"message": f"Unexpected fields in the request: {bad}"}}, status=422
                )
            # "FAIL ..." after autotune's salted prefix ("[1a2b3c4d-7] ") answers HTTP 500.
            if re.match(r"^(\[[^\]]*\] )?FAIL", _first_text(body, chat)):
                return web.json_response(
                    {"error": {"message": "injected failure", "type": "InternalServerError"}},
                    status=500,
                )
            async with sem:
                st.running += 1
                st.max_running = max(st.max_running, st.running)
                try:
                    cut = bool(break_every and k % break_every == 0)
                    return await _answer(request, body, chat, cut)
                finally:
                    st.running -= 1
        finally:
            st.in_flight -= 1

    async def _answer(
        request: web.Request, body: dict[str, Any], chat: bool, cut: bool = False
    ) -> web.StreamResponse:
        n_out = int(body.get("max_tokens") or 16)
        n_prompt = _prompt_tokens(body, chat)
        st.n_tokens += n_out
        usage = {
            "prompt_tokens": n_prompt,
            "completion_tokens": n_out,
            "total_tokens": n_prompt + n_out,
        }
        obj = "chat.completion" if chat else "text_completion"
        if not body.get("stream"):
            await asyncio.sleep(ttft_ms / 1000.0 + itl_ms / 1000.0 * max(0, n_out - 1))
            text = " ".join(f"tok{i}" for i in range(n_out))
            choice: dict[str, Any] = (
                {"index": 0, "message": {"role": "assistant", "content": text}}
                if chat
                else {"index": 0, "text": text}
            )
            choice["finish_reason"] = "length"
            ids = [i + (1000 if spec_tokens and i == diverge_at else 0) for i in range(n_out)]
            if body.get("return_token_ids"):
                choice["token_ids"] = ids
            if body.get("logprobs"):
                choice["logprobs"] = {
                    "tokens": [f"tok{i}" for i in ids],
                    "top_logprobs": [{f"tok{i}": -0.1, "other": -1.1} for i in ids],
                }
            if body.get("prompt_logprobs") is not None:
                lp = -3.0 - quality_loss
                choice["prompt_logprobs"] = [None] + [
                    {str(i): {"logprob": lp, "rank": 1}} for i in range(1, n_prompt)
                ]
            return web.json_response(
                {
                    "id": "cmpl-fake",
                    "object": obj,
                    "model": model,
                    "choices": [choice],
                    "usage": usage,
                }
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        def chunk(content: str | None, role: bool = False, finish: str | None = None) -> bytes:
            if chat:
                delta: dict[str, Any] = {"role": "assistant"} if role else {}
                if content is not None:
                    delta["content"] = content
                c: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
            else:
                c = {"index": 0, "text": content or "", "finish_reason": finish}
            return _sse({"id": "cmpl-fake", "object": obj, "model": model, "choices": [c]})

        if chat:
            await resp.write(chunk(None, role=True))  # role-only: not content
        slow = re.match(r"^(\[[^\]]*\] )?SLOW", _first_text(body, chat)) is not None
        await asyncio.sleep((ttft_ms + (slow_ms if slow else 0.0)) / 1000.0)
        # a configuration tuned for short answers: long ones stream at another pace
        itl = long_itl_ms if long_itl_ms is not None and n_out > long_above else itl_ms
        for i in range(n_out):
            if i:
                await asyncio.sleep(itl / 1000.0)
            await resp.write(chunk(f"tok{i} "))
            if cut and request.transport is not None:
                request.transport.close()  # the stream breaks mid-answer
                return resp
        await resp.write(chunk("", finish="length"))  # empty text: not content
        if send_usage and (body.get("stream_options") or {}).get("include_usage"):
            await resp.write(
                _sse(
                    {
                        "id": "cmpl-fake",
                        "object": obj,
                        "model": model,
                        "choices": [],
                        "usage": usage,
                    }
                )
            )
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def completions(request: web.Request) -> web.StreamResponse:
        return await generate(request, chat=False)

    async def chat_completions(request: web.Request) -> web.StreamResponse:
        return await generate(request, chat=True)

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    return app


class FakeOpenAIServer:
    """The fake server on a free port of 127.0.0.1, in a background thread with its own loop."""

    def __init__(self, **knobs: Any) -> None:
        self.stats = Stats()
        self.knobs = knobs
        self.port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeOpenAIServer:
        ready = threading.Event()
        errors: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                # A short shutdown: requests still streaming when a test ends are cut off.
                runner = web.AppRunner(
                    build_app(stats=self.stats, **self.knobs), shutdown_timeout=0.1
                )
                loop.run_until_complete(runner.setup())
                site = web.TCPSite(runner, "127.0.0.1", 0)
                loop.run_until_complete(site.start())
                self._runner = runner
                self.port = runner.addresses[0][1]
            except BaseException as exc:
                errors.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=serve, name="fake-openai-server", daemon=True)
        self._thread.start()
        if not ready.wait(timeout=10):
            raise RuntimeError("fake server did not start within 10 s")
        if errors:
            raise errors[0]
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self._loop = None
        self._thread = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _spawn_child(ignore_sigterm: bool) -> subprocess.Popen:
    """A long sleeper in the same process group, like vLLM's engine-core process."""
    code = "import signal, time\n"
    if ignore_sigterm:
        code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    code += "time.sleep(60)\n"
    return subprocess.Popen([sys.executable, "-c", code])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, allow_abbrev=False)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--ttft-ms", type=float, default=5.0)
    parser.add_argument("--itl-ms", type=float, default=1.0)
    parser.add_argument("--max-concurrent", type=int, default=64)
    parser.add_argument("--fail-start", action="store_true", help="print an error, exit 1")
    parser.add_argument("--spawn-child", action="store_true", help="start a sleeping child")
    parser.add_argument("--child-ignores-sigterm", action="store_true")
    parser.add_argument("--hang", action="store_true", help="never become ready")
    parser.add_argument("--log-line", default=None, help="print this line at start")
    parser.add_argument("--quality-loss", type=float, default=0.0)
    parser.add_argument("--speculative-config", default=None, help="JSON, as vLLM's")
    parser.add_argument("--diverge-at", type=int, default=-1)
    parser.add_argument("--long-itl-ms", type=float, default=None, help="ITL past --long-above")
    parser.add_argument("--long-above", type=int, default=16, help="output tokens")
    for fault in ("die-after", "die-above", "error-every", "break-every", "hang-every"):
        parser.add_argument(f"--{fault}", type=int, default=0)
    args, _unknown = parser.parse_known_args(argv)  # vLLM-style arguments are ignored

    if args.log_line:
        print(args.log_line, flush=True)
    if args.hang:
        time.sleep(3600)
        return 1
    spec = json.loads(args.speculative_config) if args.speculative_config else {}
    if args.spawn_child:
        child = _spawn_child(args.child_ignores_sigterm)
        print(f"spawned child pid {child.pid}", flush=True)
    if args.fail_start:
        time.sleep(0.5)
        print(FAIL_START_MESSAGE, file=sys.stderr, flush=True)
        return 1
    app = build_app(
        model=args.model,
        ttft_ms=args.ttft_ms,
        itl_ms=args.itl_ms,
        max_concurrent=args.max_concurrent,
        quality_loss=args.quality_loss,
        spec_tokens=int(spec.get("num_speculative_tokens", 0)),
        diverge_at=args.diverge_at,
        die_after=args.die_after,
        die_above=args.die_above,
        error_every=args.error_every,
        break_every=args.break_every,
        hang_every=args.hang_every,
        long_itl_ms=args.long_itl_ms,
        long_above=args.long_above,
    )
    # No signal handlers of its own: SIGTERM ends it at once, as the default action does.
    web.run_app(
        app, host="127.0.0.1", port=args.port, print=None, access_log=None, handle_signals=False
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
