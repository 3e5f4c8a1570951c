"""The tutorial env (examples/goal_reach, docs/custom_env.md): it builds on
CPU through the authoring contract, matches its reference bit for bit over
whole episodes, and trains with `jaxwarp train`."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np

import jaxwarp
from jaxwarp.cli import main as cli_main
from jaxwarp.run.loop import read_metrics
from jaxwarp.train.trainer import import_env_module

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "goal_reach" / "goal_reach.py"


def test_tutorial_env_builds_and_matches_its_reference():
    import_env_module(str(EXAMPLE))
    assert "goal_reach" in jaxwarp.registered_envs()
    report = jaxwarp.testing.check_consistency("goal_reach", ("cpu", "jax"), num_envs=8,
                                               rtol=0, atol=0, num_agents=4, max_steps=40)
    assert report.ok, report
    assert report.episodes_finished >= 8


def test_tutorial_env_trains_with_the_cli(tmp_path):
    out = tmp_path / "run"
    code = cli_main(["train", "--no-progress", "--out", str(out), f"env_module={EXAMPLE}",
                     "env=goal_reach", "env_config=null", "backend=cpu", "num_envs=64",
                     "num_steps=64", "total_env_steps=245760", "chunk_updates=10",
                     "checkpoint_every=60", "policies.agent.hidden_sizes=[64, 64]",
                     "policies.agent.lr=1e-3"])
    assert code == 0
    returns = [r["agent/episode_return"] for r in read_metrics(out)]
    first, last = np.nanmean(returns[:10]), np.nanmean(returns[-10:])
    # Near-random walkers run out their 100 steps (returns around -20 to -50 in the first
    # updates); agents that walk home end early and earn the bonus.
    assert last > first + 8, (first, last)


def test_tutorial_env_renders_through_its_own_hooks():
    """A new env touches only its own files: jaxwarp.render and the adapters
    draw it, at its frame rate, from the hooks of its spec (no list of envs
    anywhere in jaxwarp); it ships no training config, so `jaxwarp train
    --env goal_reach` starts from the TrainConfig defaults."""
    from jaxwarp.adapters.gymnasium import render_fps
    from jaxwarp.render import BACKGROUND, BLUE, GREEN, render_frames, rollout_states
    from jaxwarp.train.config import default_config_for

    import_env_module(str(EXAMPLE))
    env = jaxwarp.make("goal_reach", backend="jax", num_agents=2)
    states = rollout_states(env, jax.random.key(0), num_envs=2, steps=3)
    frames = np.asarray(render_frames(env, states, env_index=1, size=48))
    assert frames.shape == (4, 48, 48, 3)
    colours = {tuple(c) for c in frames.reshape(-1, 3)}
    assert {BLUE, GREEN, BACKGROUND} <= colours
    assert render_fps(env) == 10
    assert env.spec.default_config is None and default_config_for("goal_reach") is None
