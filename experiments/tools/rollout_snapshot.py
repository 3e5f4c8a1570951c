"""Byte-level snapshots of env rollouts, to hold a refactor of the kernels (or
of an env header) to the same bits, and to compare backends.

``save`` runs every built-in env (several configs: short episodes so that
time limits, terminations and auto-resets happen; Tag with the scan, the grid
and full observations; MPE under both truncations) and the tutorial env
examples/goal_reach on one backend for 50 steps of random actions (out of
range ones included; every 11th step with autoreset=False, then stepped on),
plus a few steps with bf16 observations, and writes every obs, reward, done,
info entry and state field to an npz. ``compare`` checks two such files
array by array, byte for byte (-0.0 and NaN payloads included).

    python experiments/tools/rollout_snapshot.py save /tmp/before.npz [--backend cpu] [CASE ...]
    python experiments/tools/rollout_snapshot.py compare /tmp/before.npz /tmp/after.npz

The kernels give the same bits on "cpu" and "cuda" for every env but the two
MPE envs (CUDA's and glibc's expf/log1pf differ in the last bit; README,
tests/test_conformance.py), so a "cuda" snapshot compares equal to a "cpu" one
but for the ``mpe_*`` arrays.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

CASES = {
    "cartpole": dict(max_steps=9),
    "cartpole.long": dict(max_steps=40),
    "mountain_car": dict(max_steps=9),
    "pendulum": dict(max_steps=9),
    "acrobot": dict(max_steps=9),
    "mpe_simple_spread": dict(max_steps=6),
    "mpe_simple_spread.mpe2": dict(max_steps=6, truncation="mpe2"),
    "mpe_simple_spread.nolm": dict(max_steps=5, num_landmarks=0),
    "mpe_simple_tag": dict(max_steps=6),
    "mpe_simple_tag.mpe2": dict(max_steps=7, truncation="mpe2"),
    "tag_gridworld": dict(episode_length=8, grid_length=4, num_taggers=3),
    "tag_gridworld.partial": dict(episode_length=8, grid_length=3, num_taggers=2,
                                  use_full_observation=False, random_start=True),
    "tag_continuous": dict(num_taggers=2, num_runners=6, num_other_agents_observed=4,
                           episode_length=9, grid_length=2.0, tagging_distance=0.2),
    "tag_continuous.full": dict(num_taggers=2, num_runners=5, use_full_observation=True,
                                episode_length=7, grid_length=1.5, tagging_distance=0.3,
                                runner_exits_game_after_tagged=False),
    "tag_continuous.grid": dict(num_taggers=30, num_runners=240, num_other_agents_observed=5,
                                episode_length=6, grid_length=5.0, tagging_distance=0.1),
    "goal_reach": dict(max_steps=8, num_agents=3, step_size=0.2, radius=0.3),
}
NUM_ENVS = {"tag_continuous.grid": 3}
STEPS = 50


def _register_goal_reach() -> None:
    path = ROOT / "examples" / "goal_reach" / "goal_reach.py"
    spec = importlib.util.spec_from_file_location("goal_reach", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # registers "goal_reach"


def run(case: str, backend: str, out: dict) -> None:
    import jax
    import jax.numpy as jnp

    import jaxwarp

    name, kw = case.split(".")[0], CASES[case]
    env = jaxwarp.make(name, backend=backend, **kw)
    num_envs = NUM_ENVS.get(case, 16)
    key = jax.random.PRNGKey(zlib.crc32(case.encode()) % 1000)
    obs, state = env.reset(key, num_envs)
    out[f"{case}/reset/obs"] = np.asarray(obs)
    for f in env.spec.fields:
        out[f"{case}/reset/{f.name}"] = np.asarray(getattr(state, f.name))
    nvec = np.asarray(env.action_space.nvec)
    rng = np.random.default_rng(7)
    for t in range(STEPS):
        a = rng.integers(-1, nvec + 1, size=(num_envs, env.num_agents, len(nvec)))
        obs, state, r, d, info = env.step(jax.random.PRNGKey(1000 + t), state,
                                          jnp.asarray(a.astype(np.int32)),
                                          autoreset=t % 11 != 10, in_place=False)
        p = f"{case}/{t:02d}"
        out[f"{p}/obs"], out[f"{p}/reward"], out[f"{p}/done"] = map(np.asarray, (obs, r, d))
        for k, v in info.items():
            out[f"{p}/info_{k}"] = np.asarray(v)
        for f in env.spec.fields:
            out[f"{p}/{f.name}"] = np.asarray(getattr(state, f.name))
    env16 = jaxwarp.make(name, backend=backend, obs_dtype="bfloat16", **kw)
    obs, state = env16.reset(key, 4)
    for t in range(12):
        a = rng.integers(0, nvec, size=(4, env16.num_agents, len(nvec))).astype(np.int32)
        obs, state, r, d, info = env16.step(jax.random.PRNGKey(t), state, jnp.asarray(a))
        out[f"{case}/bf16/{t:02d}/obs"] = np.asarray(obs.astype(jnp.float32))
        out[f"{case}/bf16/{t:02d}/ret"] = np.asarray(state.episode_return)
        out[f"{case}/bf16/{t:02d}/trunc"] = np.asarray(info["truncated"])
    dones = sum(int(out[f"{case}/{t:02d}/done"].sum()) for t in range(STEPS))
    print(f"{case}: {dones} episode ends", flush=True)


def _bytes(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8) if a.dtype.kind == "f" else a


def compare(a_path: str, b_path: str) -> int:
    a, b = np.load(a_path), np.load(b_path)
    if set(a.files) != set(b.files):
        print("different arrays:", sorted(set(a.files) ^ set(b.files))[:20])
        return 1
    bad = [k for k in a.files if a[k].dtype != b[k].dtype or a[k].shape != b[k].shape
           or not np.array_equal(_bytes(a[k]), _bytes(b[k]))]
    per_env: dict[str, int] = {}
    for k in bad:
        per_env[k.split("/")[0]] = per_env.get(k.split("/")[0], 0) + 1
    print(f"{len(a.files)} arrays compared byte for byte; {len(bad)} differ", per_env, bad[:20])
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("save")
    s.add_argument("out")
    s.add_argument("--backend", default="cpu", choices=("cpu", "cuda"))
    s.add_argument("cases", nargs="*", help=f"default: all of {sorted(CASES)}")
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    args = ap.parse_args()
    if args.cmd == "compare":
        return compare(args.a, args.b)
    _register_goal_reach()
    out: dict = {}
    import jax

    # The cpu backend's handlers run on the host: its arrays on the CPU device
    # also where a GPU is the default one.
    with jax.default_device(jax.devices("cpu")[0] if args.backend == "cpu" else None):
        for case in args.cases or CASES:
            run(case, args.backend, out)
    np.savez_compressed(args.out, **out)
    print(f"saved {len(out)} arrays to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
