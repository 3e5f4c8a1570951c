"""How the trainer's programs are compiled: `jit` with `COMPILER_OPTIONS`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax


# XLA options for compiling a training program (`jit`). On the GPU the
# matmuls go to cuBLAS rather than XLA's Triton GEMMs: cuBLAS fuses the bias
# add into the matmul's epilogue, where a Triton GEMM writes the product and a
# separate pass adds the bias over every [rows, 256] activation. Measured on one
# H200 (experiments/results/train_learner_variants_h200.json): A2C bf16 2000 x 110
# 1.21M -> 1.30M env-steps/s, tag_2000_envs 0.75M -> 0.83M, compile 2x faster.
# Other backends ignore the option.
COMPILER_OPTIONS: dict[str, Any] = {"xla_gpu_enable_triton_gemm": False}


def jit(fun: Callable, **kwargs: Any) -> Any:
    """``jax.jit(fun, **kwargs)`` with the trainer's `COMPILER_OPTIONS`: how
    the CLI and the benchmarks compile `Trainer.run` / `make_train`'s ``train``
    (plain ``jax.jit`` gives the same results, a little slower on the GPU)."""
    return jax.jit(fun, compiler_options=COMPILER_OPTIONS, **kwargs)
