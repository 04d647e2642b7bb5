"""Engine registry: one line per engine. Adding an engine takes an adapter module, a line here
and a search-space file in search_spaces/."""

from __future__ import annotations

from collections.abc import Callable

from tuner.engines.base import Engine
from tuner.engines.endpoint import EndpointEngine
from tuner.engines.transformers_serve import TransformersEngine
from tuner.engines.vllm import VLLMEngine

ENGINES: dict[str, Callable[[], Engine]] = {
    "vllm": VLLMEngine,
    "transformers": TransformersEngine,
    "endpoint": EndpointEngine,
}


class UnknownEngineError(ValueError):
    pass


def check_engine(name: str) -> None:
    """Raises UnknownEngineError, naming the known engines, where ``name`` is none of them."""
    if name not in ENGINES:
        raise UnknownEngineError(f"engine {name!r} is unknown; known: {', '.join(sorted(ENGINES))}")


def get_engine(name: str) -> Engine:
    check_engine(name)
    return ENGINES[name]()
