"""How the trainer's programs are compiled: `jit` with `COMPILER_OPTIONS`,
plus XLA's deterministic GPU ops unless a config says ``deterministic: false``;
without them, a program of several runs (seeds, a sweep's members: vmapped
on a device) keeps XLA's Triton GEMMs."""

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

# Reproducibility on the GPU (TrainConfig.deterministic, docs/decisions.md): XLA:GPU
# otherwise runs some reductions and scatter-adds (the gradients of gathers, for
# one) with atomics, whose order, hence rounding, changes from run to run. The
# option belongs to one compilation (XLA's DebugOptions of the module), so it is
# passed per `jax.jit` rather than through XLA_FLAGS: it takes effect after the
# backend started, and leaves the user's other programs alone. XLA:CPU ignores it
# (its programs are deterministic for a given thread count).
DETERMINISTIC_OPTIONS: dict[str, Any] = {"xla_gpu_deterministic_ops": True}


def compiler_options(deterministic: bool = True, members: int = 1) -> dict[str, Any]:
    """The XLA options `jit` compiles a training program with: `COMPILER_OPTIONS`,
    plus `DETERMINISTIC_OPTIONS` when ``deterministic``; none when not
    deterministic and the program trains ``members`` > 1 runs vmapped on each
    device. There every matmul is batched over the runs' parameters, and XLA's
    Triton GEMMs beat cuBLAS's batched ones (one H200, 10 seeds vmapped:
    GRU IPPO-RNN at 1,024 x 32 105.0 against 113.8 ms an update, MPE's
    feed-forward IPPO 18.8 against 21.3), while with deterministic ops cuBLAS
    wins (114.0 against 124.1) and one run keeps cuBLAS's epilogues
    (docs/decisions.md, "The learner"). For ``jax.jit(train,
    compiler_options=compiler_options(config.deterministic, members))``."""
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic must be a bool, got {deterministic!r}")
    if not isinstance(members, int) or isinstance(members, bool) or members < 1:
        raise TypeError(f"members must be an int >= 1 (runs vmapped on a device), "
                        f"got {members!r}")
    if deterministic:
        return {**COMPILER_OPTIONS, **DETERMINISTIC_OPTIONS}
    return dict(COMPILER_OPTIONS) if members == 1 else {}


def jit(fun: Callable, deterministic: bool = True, members: int = 1, **kwargs: Any) -> Any:
    """``jax.jit(fun, **kwargs)`` with `compiler_options(deterministic, members)`:
    how the CLI and the benchmarks compile `Trainer.run` / `make_train`'s
    ``train`` (``members``: the runs it vmaps on each device). Pass the config's
    ``deterministic``; plain ``jax.jit`` gives the same numbers on the CPU, and
    on the GPU neither the run-to-run reproducibility nor the cuBLAS matmuls."""
    return jax.jit(fun, compiler_options=compiler_options(deterministic, members), **kwargs)
