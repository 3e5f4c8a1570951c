"""Evaluate a training run's policies against random ones (``jaxwarp eval``).

`load_run` restores the newest intact checkpoint of a run folder;
`evaluate` plays whole episodes with each policy group either trained or
uniformly random:

* ``trained``: every group plays its trained policy;
* ``random``: every group acts uniformly at random (the reference level);
* ``<group> trained``: that group trained, every other group random (for
  Tag: trained taggers against random runners, and trained runners against
  random taggers), so each group's gain over random is measured against the
  same opponents.

Each matchup runs ``episodes`` envs from fresh resets with the same keys
(common random numbers: the starts are identical across matchups) until each
env has finished its first episode; the figures are means over those
episodes with a 95% confidence interval (1.96 standard errors).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp.core import episode_length
from jaxwarp.sampler import sample_actions

Policy = Callable[[jax.Array, jax.Array, Any], jax.Array]


@dataclasses.dataclass(frozen=True)
class LoadedRun:
    """A run's trainer (env, groups, models) and one seed's restored policies."""

    trainer: Any
    params: dict[str, Any]      # group -> Flax params
    obs_stats: dict[str, Any]   # group -> RunningStats ({} without normalize_obs)
    update: int                 # updates done at the checkpoint
    seed: int                   # the training seed these policies come from


def load_run(run_dir: str | Path, seed_index: int = 0) -> LoadedRun:
    """Restores the newest intact checkpoint of the run in `run_dir`.

    seed_index: which of the run's seeds (``--seeds S`` trains S at once).
    Raises FileNotFoundError when `run_dir` holds no run or no checkpoint.
    """
    from jaxwarp.train.runner import _read_saved_config, _restore_intact
    from jaxwarp.train.trainer import build_trainer

    out = Path(run_dir)
    if not (out / "config.yaml").exists():
        raise FileNotFoundError(f"--run {out}: no config.yaml there (not a jaxwarp run)")
    config, seeds = _read_saved_config(out)
    if not 0 <= seed_index < seeds:
        raise ValueError(f"seed_index must be in [0, {seeds}) for this run; got {seed_index}")
    # One device: evaluation plays a few hundred envs; the checkpoint's global
    # arrays restore onto any device count.
    trainer = build_trainer(dataclasses.replace(config, devices=1))
    keys = jnp.stack([jax.random.PRNGKey(config.seed + i) for i in range(seeds)])
    abstract = jax.eval_shape(jax.vmap(trainer.init), keys)
    restored = _restore_intact(out, abstract) if (out / "checkpoints").exists() else None
    if restored is None:
        raise FileNotFoundError(f"--run {out}: no checkpoint to evaluate (the run saves one "
                                f"every {config.checkpoint_every} updates and at the end)")
    update, rs = restored
    params, stats = jax.tree.map(lambda x: x[seed_index], (rs.params, rs.obs_stats))
    return LoadedRun(trainer=trainer, params=params, obs_stats=stats,
                     update=int(update), seed=config.seed + seed_index)


def make_policy(run: LoadedRun, trained: Mapping[str, bool]) -> Policy:
    """policy(key, obs f32[envs, agents, D], state) -> i32[envs, agents, heads].

    trained: group -> True for its trained policy (sampled from its logits,
    as in training), False for uniformly random actions.
    """
    t = run.trainer
    nvec = tuple(int(n) for n in t.env.action_space.nvec)
    which = {g: bool(trained.get(g, False)) for g in t.groups}

    def policy(key: jax.Array, obs: jax.Array, state: Any = None) -> jax.Array:
        logits, _ = t.policy(run.params, run.obs_stats, obs, which)
        actions, _ = sample_actions(key, logits, nvec, backend="jax")
        return actions

    return policy


def play(run: LoadedRun, trained: Mapping[str, bool], episodes: int, seed: int
         ) -> dict[str, np.ndarray]:
    """First-episode figures of `episodes` envs: name -> f64[episodes].

    Names: ``<group>/return`` (mean over the group's agents) and the env's
    episode metrics (e.g. Tag's ``tags``); ``finished``: 1.0 where the env
    finished an episode within the episode length (always, for envs that
    truncate there).
    """
    t = run.trainer
    env, groups = t.env, t.groups
    policy = make_policy(run, trained)
    metrics_fn = getattr(env, "episode_metrics", None)
    steps = episode_length(env)

    @jax.jit
    def run_episodes(key):
        k_reset, key = jax.random.split(key)
        obs, state = env.reset(k_reset, episodes)
        zeros = jnp.zeros((episodes,), jnp.float32)
        names = list(jax.eval_shape(metrics_fn, jnp.zeros((episodes, env.num_agents))))\
            if metrics_fn is not None else []
        acc0 = {**{f"{g}/return": zeros for g in groups}, **{k: zeros for k in names}}

        def body(carry, k):
            obs, state, got, acc = carry
            k_act, k_env = jax.random.split(k)
            obs, state, _, done, info = env.step(k_env, state, policy(k_act, obs, state))
            ret = info["episode_return"]
            first = done & ~got
            new = {f"{g}/return": jnp.take(ret, jnp.asarray(ids), axis=1).mean(axis=1)
                   for g, ids in groups.items()}
            if metrics_fn is not None:
                new.update(metrics_fn(ret))
            acc = {k: jnp.where(first, new[k].astype(jnp.float32), v) for k, v in acc.items()}
            return (obs, state, got | done, acc), None

        (_, _, got, acc), _ = jax.lax.scan(
            body, (obs, state, jnp.zeros((episodes,), bool), acc0),
            jax.random.split(key, steps))
        return acc, got

    acc, got = jax.device_get(run_episodes(jax.random.PRNGKey(seed)))
    out = {k: np.asarray(v, np.float64) for k, v in acc.items()}
    out["finished"] = np.asarray(got, np.float64)
    return out


def _stat(x: np.ndarray) -> dict[str, float]:
    n = len(x)
    sem = float(np.std(x, ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    return {"mean": float(np.mean(x)), "ci95": 1.96 * sem}


def matchups(groups: Mapping[str, Any]) -> dict[str, dict[str, bool]]:
    """name -> group -> trained?: all trained, all random, and (with several
    groups) each group trained against random others."""
    names = list(groups)
    out = {"trained": {g: True for g in names}, "random": {g: False for g in names}}
    if len(names) > 1:
        for g in names:
            out[f"{g} trained"] = {h: h == g for h in names}
    return out


def evaluate(run: LoadedRun, episodes: int = 256, seed: int = 0) -> dict[str, Any]:
    """Every matchup of `matchups`; JSON-ready.

    Returns {"update", "seed", "episodes", "matchups": {name: {figure: {mean,
    ci95}}}, "gain": {group: {"trained", "random", "delta", "ci95",
    "beats_random"}}}: a group's gain compares its return trained vs random,
    the other groups random in both (all trained vs all random for a single
    group); the interval is that of the paired difference (same starts).
    """
    if episodes < 2:
        raise ValueError(f"episodes must be >= 2 (for a confidence interval); got {episodes}")
    groups = run.trainer.groups
    raw = {name: play(run, which, episodes, seed) for name, which in matchups(groups).items()}
    result: dict[str, Any] = {
        "env": run.trainer.config.env, "update": run.update, "training_seed": run.seed,
        "eval_seed": seed, "episodes": episodes,
        "matchups": {name: {k: _stat(v) for k, v in figs.items()} for name, figs in raw.items()},
        "gain": {}}
    for g in groups:
        mine = raw[f"{g} trained"] if len(groups) > 1 else raw["trained"]
        diff = mine[f"{g}/return"] - raw["random"][f"{g}/return"]
        d = _stat(diff)
        result["gain"][g] = {
            "trained": float(mine[f"{g}/return"].mean()),
            "random": float(raw["random"][f"{g}/return"].mean()),
            "delta": d["mean"], "ci95": d["ci95"],
            "beats_random": bool(d["mean"] - d["ci95"] > 0)}
    return result


def summary_line(result: Mapping[str, Any]) -> str:
    """One line: each group's return trained vs random, with the gain's 95% CI."""
    groups = result["gain"]
    parts = []
    for g, s in groups.items():
        vs = " (others random)" if len(groups) > 1 else ""
        verdict = "beats random" if s["beats_random"] else "not above random"
        parts.append(f"{g}: trained {s['trained']:.3g} vs random {s['random']:.3g}{vs}, "
                     f"gain {s['delta']:+.3g} ± {s['ci95']:.2g} ({verdict})")
    return (f"{result['env']} update {result['update']}, {result['episodes']} episodes: "
            + "; ".join(parts))


def render_run(run: LoadedRun, steps: int = 100, size: int = 128, seed: int = 0) -> jax.Array:
    """u8[steps + 1, size, 2 * size + gap, 3]: env 0 with the trained policies
    (left) and uniformly random ones (right), from the same start (same key).
    Raises ValueError for an env with no renderer."""
    from jaxwarp.render import render_frames, rollout_states

    env, groups = run.trainer.env, run.trainer.groups
    key = jax.random.key(seed)
    draw = jax.jit(lambda s: render_frames(env, s, size=size))
    sides = [draw(rollout_states(env, key, 1, steps, make_policy(run, {g: on for g in groups})))
             for on in (True, False)]
    gap = jnp.full(sides[0].shape[:2] + (max(size // 32, 1), 3), 128, jnp.uint8)  # grey line
    return jnp.concatenate([sides[0], gap, sides[1]], axis=2)
