"""Run vLLM's own benchmark client (``vllm bench serve``) through its module.

The ``vllm`` console script of the CPU build crashes at start (ENVIRONMENT.md), so this calls
``vllm.benchmarks.serve.add_cli_args`` + ``main``. Usage is that of ``vllm bench serve``, e.g.:

    .venv/bin/python benchmarks/vllm_client.py --base-url http://127.0.0.1:8000 \
        --model NAME --tokenizer MODEL_DIR --dataset-name random --random-input-len 128 \
        --random-output-len 64 --ignore-eos --max-concurrency 32 --num-prompts 300 --seed 7

Prints vLLM's summary; with --save-result --result-dir D --result-filename F it writes its JSON.
"""

from __future__ import annotations

import argparse


def main() -> None:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    add_cli_args(parser)
    bench_main(parser.parse_args())


if __name__ == "__main__":
    main()
