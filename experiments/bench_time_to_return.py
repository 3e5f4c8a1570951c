"""Wall-clock to a return, jaxwarp's trainer vs a peer's, on one GPU in one process.

Cases (``--cases``):

* ``mpe``: jaxwarp's trainer (``mpe_simple_spread``, the ``cuda`` backend; ``cpu``
  without a GPU) vs a pure-JAX IPPO on JaxMARL's own ``MPE_simple_spread_v3``
  (`ippo_reference.py`, written from the published algorithm in the PureJaxRL
  layout), both at JaxMARL IPPO's MPE hyperparameters
  (``baselines/IPPO/config/ippo_ff_mpe.yaml``: 16 envs x 128 steps, 4 epochs x 4
  minibatches, lr 2.5e-4 annealed, tanh 64-64, gamma 0.99, GAE 0.95, clip 0.2,
  entropy 0.01, value 0.5, grad norm 0.5, 1e7 env-steps, 10 seeds vmapped).
* ``cartpole``: jaxwarp's ``cartpole_ppo`` config (the CartPole kernel) vs the same
  pure-JAX PPO on gymnax ``CartPole-v1``, both at PureJaxRL's CartPole
  hyperparameters (``purejaxrl/ppo.py``: 4 envs x 128 steps, 5e5 env-steps, lr
  2.5e-4, otherwise as above).
* ``mpe_rnn``: jaxwarp's trainer with ``policies.agent.model=gru`` vs a pure-JAX
  IPPO-RNN (`rnn_reference.py`) on ``MPE_simple_spread_v3``, both at JaxMARL's
  IPPO-RNN MPE hyperparameters (``baselines/IPPO/config/ippo_rnn_mpe.yaml``: 16
  envs x 128 steps, 4 epochs x 2 minibatches of whole sequences, lr 5e-4
  annealed, ReLU embedding 128, GRU 128, heads 128, clip 0.3, value 1.0,
  entropy 0.01, grad norm 0.5, 1e7 env-steps).
* ``mpe_mappo``: the same with ``critic=centralised`` (jaxwarp: a GRU critic over
  the env's global state, every agent's observation side by side, one carry per
  env) vs a pure-JAX MAPPO-RNN (GRU actor; GRU critic over the same world state) at
  JaxMARL's ``baselines/MAPPO/config/mappo_homogenous_rnn_mpe.yaml`` (as
  ``mpe_rnn`` but 4 minibatches, lr 2e-3, clip 0.2, value 0.5).
* ``tag``: the Tag duel (``tag_duel_cpu``: 2 taggers vs 5 runners, both PPO)
  with jaxwarp's ``cuda`` backend vs its own pure-JAX ``jax`` backend (same
  trainer; env step and action sampler in pure JAX).

Each case runs at two scales (``--scale``): ``paper``, the peer's own
hyperparameters, and ``gpu``, the same algorithm at a GPU-sized batch (see
`CASES`). Each run is one program, ``jax.jit(jax.vmap(train))`` over
``--seeds`` keys, compiled first (``lower().compile()``, timed apart) and then
run once to ``block_until_ready``. jaxwarp's is compiled as ``jaxwarp train
deterministic=false --seeds N`` compiles it (`compiler_options`; the peers run
XLA's non-deterministic ops too), the peer's with jax's defaults.

Return: the mean undiscounted episode return *per agent* (each agent's summed
reward, averaged over the env's agents; Tag: over the taggers), averaged over
the episodes that finished during an update's rollout, logged per update as an
output of the jitted program (jaxwarp: ``agent/episode_return``,
``tagger/episode_return``; the peer measures it the same way). JaxMARL's own
MPE logs report this value times the number of agents (3).

Time to threshold: each (case, scale) gets one threshold that every run in it
reaches: ``start + frac * (end - start)`` with ``start`` the mean over its runs
of the return at the first update by which about one episode per env has ended
(near-random play; `start_update`: updates before it saw only episodes that
ended early, such as Tag's with every runner caught, and are not searched) and
``end`` the lowest final return among them (``--threshold-frac``, default
0.9; ``--threshold CASE=VALUE`` fixes it). The curve is the mean over seeds of
the per-update returns, smoothed by a trailing moving mean over 2% of the
updates; the first update ``u`` (0-based) where it reaches the threshold gives
``(u + 1) / num_updates * run_s``: the update index times the measured time per
update (every update of a run has the same shapes and work, so the run's time
splits evenly), compile time excluded (reported apart). The same per seed
gives the interval of that time over seeds. Final return: per seed, the mean
over the last 5% of updates; reported as mean ± 95% interval (Student t) over
seeds.

    python experiments/bench_time_to_return.py --cases mpe,cartpole,tag --scale both
    python experiments/bench_time_to_return.py --cases mpe --seeds 2 --total-steps 40960  # smoke

Writes ``--out`` (default ``experiments/results/time_to_return_<gpu>.json``: meta
with commit, device, jax version and command; per run the timings, per-update
seed-mean curve, thresholds and returns; per (case, scale) ``jaxwarp_speedup``,
where > 1 means jaxwarp is ahead) and prints a markdown table.

On the GPU machine (no network; jaxmarl and gymnax travel as wheels in
``.whl``, downloaded here with ``python3 -m pip download --no-deps
--only-binary=:all: --python-version 3.12 --implementation cp --platform
manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform
manylinux2014_x86_64 -d .whl jaxmarl==0.2.0 gymnax==1.0.1 gymnasium==1.2.2
cloudpickle==3.1.1 farama-notifications==0.0.4``, 1.3 MB; the machine has jax,
flax, optax, chex, jaxtyping, matplotlib, pillow, safetensors and seaborn;
where seaborn is missing, `ippo_reference.import_gymnax` stands in for it),
carry ``.whl`` and run::

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
    python3 -m pip install -q --no-build-isolation --no-deps -e .
    JAXWARP_COMMIT=$SHA python3 experiments/bench_time_to_return.py --cases mpe \
        --scale both --out $OUT/ttr_mpe.json          # about 200 s on an H100
    JAXWARP_COMMIT=$SHA python3 experiments/bench_time_to_return.py \
        --cases cartpole,tag --scale both --out $OUT/ttr_cp_tag.json   # about 220 s

with SHA the commit here (``git rev-parse HEAD``; the machine's copy of the tree
carries no usable .git). Two calls of the 10-minute limit; ``--update`` merges a
run into an existing ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import re
import shlex
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ippo_reference
import rnn_reference

from jaxwarp.train.compile import compiler_options

# Hyperparameters shared by both sides of a case (the PPO algorithm's settings).
COMMON = {"update_epochs": 4, "num_minibatches": 4, "anneal_lr": True, "gamma": 0.99,
              "gae_lambda": 0.95, "clip_eps": 0.2, "ent_coef": 0.01, "vf_coef": 0.5,
              "max_grad_norm": 0.5, "hidden_sizes": (64, 64), "activation": "tanh"}

def _sizes(num_envs: int, num_steps: int, total_env_steps: int, lr: float) -> dict[str, Any]:
    """One scale of a case: its batch, its env-steps per seed and its learning rate."""
    return {"num_envs": num_envs, "num_steps": num_steps, "total_env_steps": total_env_steps,
            "lr": lr}


def _case(jaxwarp_config: str, group: str, peer: str, peer_label: str,
          scales: dict[str, dict[str, Any]], **hyperparameters: Any) -> dict[str, Any]:
    """A case: the shipped config jaxwarp trains and the group whose return is
    timed, the peer (its implementation and label), the sizes per scale and
    the hyperparameters that differ from COMMON (both sides)."""
    case = {"jaxwarp_config": jaxwarp_config, "group": group, "peer": peer,
            "peer_label": peer_label, "scales": scales}
    if hyperparameters:
        case["hyperparameters"] = hyperparameters
    return case


# case -> what it compares, and per scale the sizes (env-steps are per seed).
CASES: dict[str, dict[str, Any]] = {
    "mpe": _case(
        "mpe_simple_spread_ppo", "agent", "ippo_jaxmarl",
        "pure-JAX IPPO on JaxMARL MPE_simple_spread_v3",
        # JaxMARL baselines/IPPO/config/ippo_ff_mpe.yaml; gpu: 64x the envs, a rollout
        # of 32 steps (about one 26-step episode), JaxMARL's other settings; 2x the env-steps.
        {"paper": _sizes(16, 128, 10_000_000, 2.5e-4),
         "gpu": _sizes(1024, 32, 20_000_000, 2.5e-4)}),
    "mpe_rnn": _case(
        "mpe_simple_spread_ppo", "agent", "ippo_rnn_jaxmarl",
        "pure-JAX IPPO-RNN on JaxMARL MPE_simple_spread_v3",
        # gpu as the mpe case's: 64x the envs, 32-step rollouts (BPTT over 32)
        {"paper": _sizes(16, 128, 10_000_000, 5e-4), "gpu": _sizes(1024, 32, 20_000_000, 5e-4)},
        # JaxMARL baselines/IPPO/config/ippo_rnn_mpe.yaml (FC_DIM_SIZE, GRU_HIDDEN_DIM;
        # its networks use ReLU whatever ACTIVATION says)
        model="gru", hidden_sizes=(128,), rnn_size=128, activation="relu", num_minibatches=2,
        clip_eps=0.3, vf_coef=1.0),
    "mpe_mappo": _case(
        "mpe_simple_spread_ppo", "agent", "mappo_rnn_jaxmarl",
        "pure-JAX MAPPO-RNN on JaxMARL MPE_simple_spread_v3",
        {"paper": _sizes(16, 128, 10_000_000, 2e-3), "gpu": _sizes(1024, 32, 20_000_000, 2e-3)},
        # JaxMARL baselines/MAPPO/config/mappo_homogenous_rnn_mpe.yaml
        model="gru", critic="centralised", hidden_sizes=(128,), rnn_size=128, activation="relu",
        num_minibatches=4, clip_eps=0.2, vf_coef=0.5),
    "cartpole": _case(
        "cartpole_ppo", "agent", "ppo_gymnax", "pure-JAX PPO on gymnax CartPole-v1",
        # PureJaxRL purejaxrl/ppo.py's CartPole-v1 config; gpu: 512x the envs, 32-step
        # rollouts, jaxwarp cartpole_ppo's lr
        {"paper": _sizes(4, 128, 500_000, 2.5e-4), "gpu": _sizes(2048, 32, 10_000_000, 2.5e-3)}),
    "tag": _case(
        "tag_duel_cpu", "tagger", "jaxwarp_jax", "jaxwarp trainer, pure-JAX `jax` backend",
        # paper: tag_duel_cpu as shipped (its own hyperparameters, both sides);
        # gpu: 32x the envs, 100 updates
        {"paper": {}, "gpu": {"num_envs": 2048, "total_env_steps": 10_240_000}}),
}

T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
       9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
       16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 25: 2.060, 30: 2.042}


class BenchError(Exception):
    """A bad flag or a missing peer package: one line, exit 2."""


def t95(dof: int) -> float:
    """Two-sided 95% Student t quantile for `dof` degrees of freedom."""
    if dof in T95:
        return T95[dof]
    below = [d for d in T95 if d < dof]
    return T95[max(below)] if dof <= 30 else 1.96


def mean_ci(x: np.ndarray) -> dict[str, Any]:
    """{"mean", "ci95" (half-width, Student t; NaN for one value), "n", "values"}
    over the finite entries of x."""
    x = np.asarray(x, np.float64)
    x = x[np.isfinite(x)]
    n = len(x)
    if n == 0:
        return {"mean": None, "ci95": None, "n": 0, "values": []}
    ci = float(t95(n - 1) * np.std(x, ddof=1) / math.sqrt(n)) if n > 1 else None
    return {"mean": float(np.mean(x)), "ci95": ci, "n": n, "values": [float(v) for v in x]}


def smooth(curve: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving mean over `window` updates of the finite values (NaN where
    none is finite yet)."""
    out = np.full(len(curve), np.nan)
    for i in range(len(curve)):
        part = curve[max(0, i + 1 - window):i + 1]
        part = part[np.isfinite(part)]
        if len(part):
            out[i] = part.mean()
    return out


def first_reach(curve: np.ndarray, threshold: float) -> int | None:
    """Index of the first entry >= threshold, or None."""
    hit = np.nonzero(np.nan_to_num(curve, nan=-np.inf) >= threshold)[0]
    return int(hit[0]) if len(hit) else None


def _nanmean(x: Any, axis: int | None = None) -> Any:
    """np.nanmean without its warning for all-NaN slices (NaN there)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(x, axis=axis)


def window_of(num_updates: int) -> int:
    return max(1, round(0.02 * num_updates))


def final_per_seed(returns: np.ndarray) -> np.ndarray:
    """f64[seeds]: mean of each seed's returns over the last 5% of updates."""
    tail = max(1, round(0.05 * returns.shape[1]))
    return _nanmean(returns[:, -tail:], axis=1)


def seed_mean(x: np.ndarray) -> np.ndarray:
    """f64[updates]: mean over seeds (axis 0) of the finite values; NaN where none."""
    x = np.asarray(x, np.float64)
    n = np.isfinite(x).sum(axis=0)
    total = np.where(np.isfinite(x), x, 0.0).sum(axis=0)
    return np.where(n > 0, total / np.maximum(n, 1), np.nan)


def start_update(episodes: np.ndarray, num_envs: int) -> int | None:
    """The first update by which, on the mean over seeds, as many episodes have
    finished as there are envs (about one per env): updates before it see only
    episodes that ended early (Tag: all runners caught), whose returns are far
    from the typical near-random one."""
    hit = np.nonzero(np.cumsum(seed_mean(episodes)) >= num_envs)[0]
    return int(hit[0]) if len(hit) else None


def start_level(returns: np.ndarray, episodes: np.ndarray, num_envs: int) -> float:
    """Seed-mean return at `start_update` (near-random play); NaN if none."""
    u = start_update(episodes, num_envs)
    return math.nan if u is None else float(seed_mean(returns)[u])


# --------------------------------------------------------------------------- runs
def _timed(fn, keys, options: dict | None = None) -> tuple[float, float, Any]:
    """(compile_s, run_s, outputs) of jax.jit(jax.vmap(fn)) over keys, compiled
    with the XLA `options` (None: jax's defaults)."""
    jitted = jax.jit(jax.vmap(fn), compiler_options=options)
    t0 = time.perf_counter()
    compiled = jitted.lower(keys).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = jax.block_until_ready(compiled(keys))
    return compile_s, time.perf_counter() - t0, out

# jaxwarp's model with bfloat16 matmuls (float32 parameters), the peer as it is: does the
# 64-64 model learn as well in bf16 (issue 51: the PPO kernels' precision)?
for _name in ("cartpole", "mpe"):
    CASES[f"{_name}_bf16"] = {**CASES[_name], "hyperparameters": {
        **CASES[_name].get("hyperparameters", {}), "dtype": "bfloat16"}}


def hyperparameters(case: str, scale: str, total_steps: int | None) -> dict[str, Any]:
    """The settings of one (case, scale); Tag: the overrides on its config."""
    hp = dict(CASES[case]["scales"][scale])
    if case != "tag":
        hp = {**COMMON, **CASES[case].get("hyperparameters", {}), **hp}
    if total_steps is not None:  # at least one update (smoke tests with --scale both)
        hp["total_env_steps"] = max(total_steps, _size(case, hp, "num_envs")
                                    * _size(case, hp, "num_steps"))
    return hp


def _size(case: str, hp: dict[str, Any], key: str) -> int:
    """hp[key], else the case's jaxwarp config's value (Tag)."""
    if key in hp:
        return int(hp[key])
    from jaxwarp.train import load_config
    return int(getattr(load_config(CASES[case]["jaxwarp_config"]), key))


def jaxwarp_overrides(case: str, hp: dict[str, Any], backend: str, seed: int) -> list[str]:
    """key=value overrides of the case's jaxwarp config for `hp`."""
    out = [f"backend={backend}", "sampler=auto", "devices=1", f"seed={seed}"]
    if case == "tag":
        return out + [f"{k}={v}" for k, v in hp.items()]
    group = CASES[case]["group"]
    for k in ("num_envs", "num_steps", "total_env_steps", "update_epochs", "num_minibatches",
              "gamma", "gae_lambda", "clip_eps", "ent_coef", "vf_coef", "max_grad_norm"):
        out.append(f"{k}={hp[k]}")
    out += [f"anneal_lr={str(hp['anneal_lr']).lower()}", "algorithm=ppo",
            "normalize_advantages=true", "normalize_obs=false", "obs_dtype=float32",
            f"policies.{group}.model={hp.get('model', 'mlp')}",
            f"policies.{group}.hidden_sizes=[{', '.join(map(str, hp['hidden_sizes']))}]",
            f"policies.{group}.activation={hp['activation']}",
            f"policies.{group}.shared_torso=false",
            f"policies.{group}.dtype={hp.get('dtype', 'float32')}",
            f"policies.{group}.lr={hp['lr']}"]
    if "rnn_size" in hp:
        out.append(f"policies.{group}.rnn_size={hp['rnn_size']}")
    if "critic" in hp:
        out.append(f"critic={hp['critic']}")
    return out


def jaxwarp_train(case: str, hp: dict[str, Any], backend: str, seed: int,
                  extra: list[str] = ()) -> tuple[Any, Any, list[str]]:
    """(train(key) -> (state, metrics), the trainer, its overrides) of jaxwarp's
    trainer on `case` at `hp` (`extra`: more overrides)."""
    from jaxwarp.train import build_trainer, load_config

    overrides = jaxwarp_overrides(case, hp, backend, seed) + list(extra)
    config = load_config(CASES[case]["jaxwarp_config"], overrides)
    trainer = build_trainer(dataclasses.replace(config, chunk_updates=1, checkpoint_every=1))

    def train(key):  # jaxwarp.train.make_train's, keeping the trainer for its env
        return trainer.run(trainer.init(key), trainer.derived.num_updates)

    return train, trainer, overrides


def run_jaxwarp(case: str, hp: dict[str, Any], backend: str, seeds: int, seed: int
                ) -> dict[str, Any]:
    from jaxwarp.train import fused

    train, trainer, overrides = jaxwarp_train(case, hp, backend, seed)
    config, d = trainer.config, trainer.derived
    keys = jax.numpy.stack([jax.random.PRNGKey(seed + i) for i in range(seeds)])
    # compiled as `jaxwarp train deterministic=false --seeds N` compiles (the peers
    # are not deterministic either): jaxwarp.train.compile.compiler_options
    options = compiler_options(False, members=seeds)
    compile_s, run_s, (_, metrics) = _timed(train, keys, options)
    groups = sorted(k.split("/")[0] for k in metrics if k.endswith("/episode_return"))
    returns = {g: np.asarray(metrics[f"{g}/episode_return"], np.float64) for g in groups}
    return {"impl": "jaxwarp", "label": f"jaxwarp trainer, `{backend}` backend",
                "env": config.env, "backend": backend, "config": CASES[case]["jaxwarp_config"],
                "overrides": overrides, "num_updates": d.num_updates,
                "batch_env_steps": d.batch_env_steps,
                "num_agents": int(trainer.env.num_agents),
                "num_envs": config.num_envs,
                # the rollout the seeds ran (vmapped: their envs count together)
                "rollout": fused.seeds_path(trainer.rollout_path, trainer.policy, trainer.env,
                                            trainer.sampler, config.num_envs, seeds),
                "compiler_options": options,
                "compile_s": compile_s, "run_s": run_s, "returns": returns,
                "episodes": np.asarray(metrics["episodes"], np.float64)}


def peer_train(case: str, hp: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(train(key) -> (state, metrics), its config, its env) of the pure-JAX
    peer of `case` (not the Tag duel's, which is jaxwarp's `jax` backend)."""
    mpe = case.startswith("mpe")
    try:
        venv = ippo_reference.jaxmarl_env("MPE_simple_spread_v3") if mpe \
            else ippo_reference.gymnax_env("CartPole-v1")
    except ImportError as e:
        need = "jaxmarl==0.2.0" if mpe else "gymnax==1.0.1"
        raise BenchError(f"case {case} needs {need} ({e}); pip install --no-deps {need} "
                         "(see this script's docstring)") from None
    recurrent = CASES[case]["peer"] in ("ippo_rnn_jaxmarl", "mappo_rnn_jaxmarl")
    ref = rnn_reference if recurrent else ippo_reference
    cls = rnn_reference.RNNConfig if recurrent else ippo_reference.PPOConfig
    fields = {f.name for f in dataclasses.fields(cls)}
    kw = {k: v for k, v in hp.items() if k in fields}
    if recurrent:
        kw["algorithm"] = "mappo" if CASES[case]["peer"] == "mappo_rnn_jaxmarl" else "ippo"
    config = cls(**kw)
    return ref.make_train(config, venv), config, venv


def run_peer(case: str, hp: dict[str, Any], seeds: int, seed: int) -> dict[str, Any]:
    if CASES[case]["peer"] == "jaxwarp_jax":
        out = run_jaxwarp(case, hp, "jax", seeds, seed)
        out["impl"] = "jaxwarp_jax"
        return out
    train, config, venv = peer_train(case, hp)
    keys = jax.numpy.stack([jax.random.PRNGKey(seed + i) for i in range(seeds)])
    compile_s, run_s, (_, metrics) = _timed(train, keys)
    group = CASES[case]["group"]
    return {"impl": CASES[case]["peer"], "label": CASES[case]["peer_label"], "env": venv.name,
                "backend": "jax", "num_updates": config.num_updates,
                "batch_env_steps": config.num_envs * config.num_steps,
                "num_agents": venv.num_agents, "compile_s": compile_s, "run_s": run_s,
                "num_envs": config.num_envs,
                "returns": {group: np.asarray(metrics["episode_return"], np.float64)},
                "episodes": np.asarray(metrics["episodes"], np.float64)}


def summarise(run: dict[str, Any], group: str, seeds: int) -> dict[str, Any]:
    """Adds curve, final return and throughput; keeps the raw returns aside."""
    r = run["returns"][group]
    u = run["num_updates"]
    curve = seed_mean(r)
    out = {k: v for k, v in run.items() if k not in ("returns", "episodes")}
    out.update(group=group, seeds=seeds, seconds_per_update=run["run_s"] / u,
               env_steps_per_s=u * run["batch_env_steps"] * seeds / run["run_s"],
               agent_steps_per_s=(u * run["batch_env_steps"] * seeds / run["run_s"]
                                  * run["num_agents"] if run.get("num_agents") else None),
               curve=[None if not np.isfinite(v) else float(v) for v in curve],
               smoothing_window=window_of(u),
               start_update=start_update(run["episodes"], run["num_envs"]),
               start_return=start_level(r, run["episodes"], run["num_envs"]),
               final_return=mean_ci(final_per_seed(r)),
               finite_returns=bool(np.isfinite(final_per_seed(r)).all()))
    out["final_return_other_groups"] = {g: mean_ci(final_per_seed(v))
                                        for g, v in run["returns"].items() if g != group}
    return out


def time_to(run: dict[str, Any], returns: np.ndarray, threshold: float) -> dict[str, Any]:
    """Time (s, compile excluded), updates and env-steps to `threshold`: from
    the seed-mean curve, and per seed (mean ± 95% interval over the seeds that
    reach it); updates before `start_update` are not searched."""
    u, w = run["num_updates"], window_of(run["num_updates"])
    per_update = run["run_s"] / u
    # Updates before the start level's saw only early-ended episodes: they do not count.
    first = start_update(run["episodes"], run["num_envs"]) or 0
    returns = np.array(returns, np.float64)
    returns[:, :first] = np.nan
    hit = first_reach(smooth(seed_mean(returns), w), threshold)
    per_seed = [first_reach(smooth(s, w), threshold) for s in returns]
    times = np.array([np.nan if h is None else (h + 1) * per_update for h in per_seed])
    return {
        "threshold": threshold,
        "updates": None if hit is None else hit + 1,
        "env_steps_per_seed": None if hit is None else (hit + 1) * run["batch_env_steps"],
        "seconds": None if hit is None else (hit + 1) * per_update,
        "per_seed_seconds": mean_ci(times),
        "seeds_reached": int(np.isfinite(times).sum()),
    }


def threshold_for(runs: list[dict[str, Any]], group: str, frac: float) -> float | None:
    starts = [start_level(r["returns"][group], r["episodes"], r["num_envs"]) for r in runs]
    finals = [float(_nanmean(final_per_seed(r["returns"][group]))) for r in runs]
    start, end = float(_nanmean(starts)), min(finals)
    if not (np.isfinite(start) and np.isfinite(end)) or end <= start:
        return None  # nothing learned: no threshold that means anything
    return start + frac * (end - start)


# --------------------------------------------------------------------------- meta
def git_commit() -> tuple[str, bool | None]:
    """(commit, dirty) of the code that runs: $JAXWARP_COMMIT where set (the GPU
    machine gets a copy of the working tree whose .git, if any, is not this
    checkout's), else git's HEAD and whether tracked files differ from it."""
    if os.environ.get("JAXWARP_COMMIT"):
        return os.environ["JAXWARP_COMMIT"], None
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                    cwd=root, capture_output=True, text=True,
                                    check=True).stdout.strip())
        return sha, dirty
    except (OSError, subprocess.CalledProcessError):
        return "unknown", None


def _version(name: str) -> str | None:
    from importlib import metadata
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def device_slug(kind: str, platform_name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100'; CPU -> 'cpu'."""
    if platform_name == "cpu":
        return "cpu"
    m = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b", kind)
    return m.group(1).lower() if m else re.sub(r"[^a-z0-9]+", "_", kind.lower()).strip("_")


def meta(backend: str, argv: list[str], seeds: int, frac: float) -> dict[str, Any]:
    dev = jax.devices()[0]
    sha, dirty = git_commit()
    return {
        "commit": sha, "dirty": dirty, "device": dev.device_kind, "platform": dev.platform,
        "jaxwarp_backend": backend, "jax": jax.__version__, "jaxlib": _version("jaxlib"),
        "flax": _version("flax"), "optax": _version("optax"), "jaxmarl": _version("jaxmarl"),
        "gymnax": _version("gymnax"), "python": platform.python_version(),
        "command": " ".join(shlex.quote(a) for a in ["python3"] + argv),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "seeds": seeds, "threshold_frac": frac,
        "return": "mean undiscounted episode return per agent (each agent's summed reward, "
                  "averaged over the env's agents; Tag: the taggers), averaged over the "
                  "episodes that finished in an update's rollout; JaxMARL's MPE logs "
                  "report 3x this value",
        "time_to_threshold": "first update u where the seed-mean return curve, smoothed by a "
                             "trailing mean over 2% of the updates, reaches the threshold; "
                             "seconds = (u + 1) / num_updates * run_s (compile excluded, "
                             "every update the same work); per-update returns are outputs "
                             "of the one jitted program",
        "threshold": "start + frac * (end - start) per (case, scale): start = mean return "
                     "of the first update with a finished episode, end = lowest final "
                     "return of the runs compared",
        "final_return": "per seed the mean over the last 5% of updates; mean ± 95% "
                        "interval (Student t) over seeds",
    }


# --------------------------------------------------------------------------- table
def _fmt(x: float | None, spec: str = ".3g") -> str:
    return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) \
        else format(x, spec)


def table(result: dict[str, Any]) -> str:
    from jaxwarp.units import si

    lines = [f"On {result['meta']['device']}; env-steps/s and agent-steps/s (env-steps x "
             "agents per env) as each trainer ran them:", "",
             ("| case | scale | trainer | envs x steps | updates | compile s | run s | "
              "env-steps/s | agent-steps/s | threshold | time to threshold s | "
              "env-steps to threshold | final return (±95%) | sooner |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for case, cd in result["cases"].items():
        for scale, sd in cd["scales"].items():
            runs = sd["runs"]
            ref = runs.get("peer", {}).get("to_threshold", {}).get("seconds")
            for key in ("jaxwarp", "peer"):
                r = runs[key]
                tt = r.get("to_threshold", {})
                fr = r["final_return"]
                speed = ""
                if key == "jaxwarp" and ref and tt.get("seconds"):
                    speed = f"{ref / tt['seconds']:.2f}x"
                envs = r["batch_env_steps"] // max(1, r["steps_per_update_per_env"])
                lines.append(
                    f"| {case} | {scale} | {r['label']} | {envs} x "
                    f"{r['steps_per_update_per_env']} | {r['num_updates']} | "
                    f"{r['compile_s']:.1f} | {r['run_s']:.1f} | {r['env_steps_per_s']:,.0f} | "
                    f"{si(r['agent_steps_per_s']) if r.get('agent_steps_per_s') else '–'} | "
                    f"{_fmt(sd['threshold'], '.4g')} | {_fmt(tt.get('seconds'), '.2f')} | "
                    f"{_fmt(tt.get('env_steps_per_seed'), ',')} | "
                    f"{_fmt(fr['mean'], '.4g')} ± {_fmt(fr['ci95'], '.2g')} | {speed} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- main
def parse_thresholds(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        case, _, value = item.partition("=")
        try:
            out[case] = float(value)
        except ValueError:
            raise BenchError(f"--threshold {item!r}: expected CASE=NUMBER (e.g. mpe=-22)"
                             ) from None
        if case not in CASES:
            raise BenchError(f"--threshold {item!r}: unknown case {case!r}; expected one of "
                             f"{sorted(CASES)}")
    return out


def run_bench(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    import jaxwarp

    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if not cases or unknown:
        raise BenchError(f"--cases: unknown case(s) {unknown}; expected a comma list of "
                         f"{sorted(CASES)}")
    if args.seeds < 1:
        raise BenchError(f"--seeds {args.seeds}: expected an integer >= 1")
    if not 0 < args.threshold_frac <= 1:
        raise BenchError(f"--threshold-frac {args.threshold_frac}: expected a number in (0, 1]")
    fixed = parse_thresholds(args.threshold)
    scales = ["paper", "gpu"] if args.scale == "both" else [args.scale]
    backend = args.backend or ("cuda" if jaxwarp.gpu_available() else "cpu")
    result: dict[str, Any] = {"meta": meta(backend, argv, args.seeds, args.threshold_frac),
                              "cases": {}}
    for case in cases:
        group = CASES[case]["group"]
        result["cases"][case] = {"group": group, "jaxwarp_config": CASES[case]["jaxwarp_config"],
                                 "peer": CASES[case]["peer_label"], "scales": {}}
        for scale in scales:
            hp = hyperparameters(case, scale, args.total_steps)
            raw = {}
            for key in ("jaxwarp", "peer"):
                raw[key] = (run_jaxwarp(case, hp, backend, args.seeds, args.seed)
                            if key == "jaxwarp" else run_peer(case, hp, args.seeds, args.seed))
                r = raw[key]
                final = final_per_seed(r["returns"][group])
                print(f"{case}/{scale} {key}: compile {r['compile_s']:.1f} s, run "
                      f"{r['run_s']:.1f} s, {r['num_updates']} updates, final return "
                      f"{_nanmean(final):.4g}", flush=True)
            threshold = fixed.get(case, threshold_for(list(raw.values()), group,
                                                      args.threshold_frac))
            runs = {}
            for key, run in raw.items():
                s = summarise(run, group, args.seeds)
                s["steps_per_update_per_env"] = _size(case, hp, "num_steps")
                if threshold is not None:
                    s["to_threshold"] = time_to(run, run["returns"][group], threshold)
                runs[key] = s
            sd: dict[str, Any] = {"hyperparameters": {k: (list(v) if isinstance(v, tuple) else v)
                                                      for k, v in hp.items()},
                                  "threshold": threshold, "threshold_fixed": case in fixed,
                                  "runs": runs}
            a = runs["jaxwarp"].get("to_threshold", {}).get("seconds")
            b = runs["peer"].get("to_threshold", {}).get("seconds")
            # > 1: jaxwarp ahead (less time to the threshold, less run time, more env-steps/s)
            sd["jaxwarp_speedup"] = {
                "time_to_threshold": b / a if a and b else None,
                "run_s": runs["peer"]["run_s"] / runs["jaxwarp"]["run_s"],
                "env_steps_per_s": runs["jaxwarp"]["env_steps_per_s"]
                / runs["peer"]["env_steps_per_s"],
            }
            result["cases"][case]["scales"][scale] = sd
            print(f"{case}/{scale}: jaxwarp {runs['jaxwarp']['run_s']:.1f} s "
                  f"(compile {runs['jaxwarp']['compile_s']:.1f}), peer "
                  f"{runs['peer']['run_s']:.1f} s (compile {runs['peer']['compile_s']:.1f}), "
                  f"threshold {_fmt(threshold, '.4g')}", flush=True)
            if args.out:  # after every (case, scale): a cut-off run keeps what it measured
                _write(args.out, result, args.update)
    return result


def _finite(x: Any) -> Any:
    """x with NaN/inf floats as None (strict JSON)."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    return x


def _write(path: str, result: dict[str, Any], update: bool) -> None:
    p = Path(path)
    out = result
    if update and p.exists():  # keep the cases of an earlier run that this one did not redo
        old = json.loads(p.read_text())
        cases = dict(old.get("cases", {}))
        for case, cd in result["cases"].items():
            merged = dict(cases.get(case, {}))
            merged.update({k: v for k, v in cd.items() if k != "scales"})
            merged["scales"] = {**merged.get("scales", {}), **cd["scales"]}
            cases[case] = merged
        metas = old.get("meta_runs", [old["meta"]] if "meta" in old else [])
        out = {"meta": result["meta"], "meta_runs": metas + [result["meta"]], "cases": cases}
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(_finite(out), indent=1, allow_nan=False))
    tmp.replace(p)


def main(argv: list[str] | None = None) -> int:
    from jaxwarp.train import ConfigError

    script = Path(__file__).resolve()
    try:  # the command as typed from the repository root
        script = script.relative_to(script.parent.parent)
    except ValueError:
        pass
    argv = [str(script)] + list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="mpe,cartpole,tag",
                    help="comma list of mpe, mpe_rnn, mpe_mappo, cartpole, tag (default: "
                         "mpe,cartpole,tag)")
    ap.add_argument("--seeds", type=int, default=10, help="seeds vmapped in one program")
    ap.add_argument("--seed", type=int, default=0, help="first seed (seeds seed..seed+S-1)")
    ap.add_argument("--scale", choices=("paper", "gpu", "both"), default="both")
    ap.add_argument("--total-steps", type=int, default=None,
                    help="env-steps per seed for every run, at least one update (smoke tests)")
    ap.add_argument("--backend", choices=("cuda", "cpu"), default=None,
                    help="jaxwarp's backend (default: cuda with a GPU, else cpu)")
    ap.add_argument("--threshold-frac", type=float, default=0.9)
    ap.add_argument("--threshold", action="append", default=[], metavar="CASE=VALUE",
                    help="fixed return threshold for a case (repeatable)")
    ap.add_argument("--out", default=None,
                    help="JSON path (default experiments/results/time_to_return_<gpu>.json)")
    ap.add_argument("--update", action="store_true",
                    help="merge into an existing --out (keeps cases this run does not redo)")
    args = ap.parse_args(argv[1:])
    if args.out is None:
        dev = jax.devices()[0]
        args.out = str(Path(__file__).resolve().parent / "results"
                       / f"time_to_return_{device_slug(dev.device_kind, dev.platform)}.json")
    try:
        result = run_bench(args, argv)
    except (BenchError, ConfigError) as e:
        print(f"bench_time_to_return: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    print()
    print(table(result))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
