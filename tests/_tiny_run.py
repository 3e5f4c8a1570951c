"""The tiny CartPole run that the CLI, resume, reliability and fault tests
share: 8 updates of 4 envs x 4 steps, checkpoints every 2 updates (Orbax keeps
the last 2), on the jax backend (no kernel build)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from jaxwarp.cli import main as cli_main
from jaxwarp.train import TrainConfig, load_config

TINY = ["--env", "cartpole", "backend=jax", "num_envs=4", "num_steps=4",
        "total_env_steps=128", "num_minibatches=1", "update_epochs=1", "chunk_updates=2",
        "checkpoint_every=2", "policies.agent.hidden_sizes=[8]"]


def tiny_config(*overrides: str) -> TrainConfig:
    """TINY as a TrainConfig, with `overrides` (key=value) on top."""
    return load_config(None, [f"env={TINY[1]}", *TINY[2:], *overrides])


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    """``jaxwarp train --no-progress ARGV`` in this process: (exit code, stdout, stderr)."""
    code = cli_main(["train", "--no-progress", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def metric_table(rows: Iterable[dict]) -> dict:
    """metrics.jsonl's rows by (update, seed) without their timing columns: what
    two runs that trained alike have in common."""
    timing = ("env_steps_per_s", "wall_s")
    return {(r["update"], r["seed"]): {k: v for k, v in r.items() if k not in timing}
            for r in rows}


def ckpt_steps(out: Path) -> list[int]:
    """The updates of the checkpoints in run folder `out`, in order."""
    return sorted(int(p.name) for p in (out / "checkpoints").iterdir() if p.name.isdigit())
