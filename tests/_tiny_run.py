"""The tiny CartPole run that the CLI, resume, reliability and fault tests
share: 8 updates of 4 envs x 4 steps, checkpoints every 2 updates (Orbax keeps
the last 2), on the jax backend (no kernel build)."""

from __future__ import annotations

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
