"""End-to-end training throughput: rollout + update of Tag in one jitted program.

For each case (shipped config, num_envs, algorithm) and env backend, the
trainer's `run(state, n)` (n updates: policy forward, sampler, env step,
GAE, Optax updates) is compiled once (time reported separately), called
once to warm up, then timed over several calls, each ending with
`block_until_ready`. env-steps/s = updates x num_envs x num_steps / time.
The kernel backend ("cuda", or "cpu" without a GPU) and the pure-JAX
reference backend ("jax": env in pure JAX, sampler jax.random.categorical)
run side by side in the same process. Programs compile as the CLI's do
(`jaxwarp.train.jit`: deterministic unless --nondeterministic).

    python experiments/bench_train.py --out experiments/results/bench_train_h100.json
    python experiments/bench_train.py --small     # sizes that suit a CPU
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import jaxwarp
from jaxwarp.benchmark import (
    add_bench_arguments,
    bench_backends,
    matmul_flops,
    model_flops_utilization,
    run_meta,
)
from jaxwarp.models import GRUActorCritic
from jaxwarp.train import build_trainer, jit, load_config, register_model
from jaxwarp.units import device_name, rate_text


class DenseActorCritic(nn.Module):
    """MLPActorCritic as written before its fused matmuls: plain nn.Dense
    layers, XLA's own gradient (model ``mlp_dense`` in the cases below)."""

    nvec: tuple
    hidden: tuple
    shared: bool
    dtype: Any

    @nn.compact
    def __call__(self, obs):
        init = nn.initializers.orthogonal(np.sqrt(2))

        def torso(x):
            for w in self.hidden:
                x = nn.relu(nn.Dense(w, kernel_init=init, dtype=self.dtype)(x))
            return x
        a = torso(obs)
        v = a if self.shared else torso(obs)
        logits = nn.Dense(int(sum(self.nvec)), dtype=self.dtype,
                          kernel_init=nn.initializers.orthogonal(0.01))(a)
        value = nn.Dense(1, dtype=self.dtype, kernel_init=nn.initializers.orthogonal(1.0))(v)
        return logits.astype(jnp.float32), value[..., 0].astype(jnp.float32)


register_model("mlp_dense", lambda nvec, p: DenseActorCritic(
    tuple(int(n) for n in nvec), tuple(p.hidden_sizes), p.shared_torso, jnp.dtype(p.dtype)))


class StepByStepGRU(GRUActorCritic):
    """The shipped gru without its sequence form: the learner replays the whole
    model step by step (model ``gru_steps``: the learner's path before the
    sequence form, docs/decisions.md)."""

    sequence = None


register_model("gru_steps", lambda nvec, p: StepByStepGRU(
    tuple(int(n) for n in nvec), tuple(p.hidden_sizes), p.rnn_size, p.activation))

# (shipped config, overrides, updates per timed call)
BF16 = ["policies.tagger.dtype=bfloat16", "policies.runner.dtype=bfloat16"]
OBS16 = ["obs_dtype=bfloat16"]
F32_SEPARATE = ["policies.tagger.shared_torso=false", "policies.runner.shared_torso=false",
                "policies.tagger.dtype=float32", "policies.runner.dtype=float32",
                "obs_dtype=float32"]
DENSE = ["policies.tagger.model=mlp_dense", "policies.runner.model=mlp_dense"]
AT_2000 = ["num_envs=2000", "num_steps=50", "num_minibatches=10"]  # gradients over 10 env chunks
GPU_CASES = [
    # 0-1: WarpDrive's training configuration: 100 envs x 110 agents, A2C, shared fc 256-256,
    # both policy groups trained.
    ("tag_warpdrive_default", [], 5),
    ("tag_warpdrive_default", BF16, 5),
    # 2-4: the same at 2000 envs (50 steps per update); 4: observations in bfloat16 too.
    ("tag_warpdrive_default", AT_2000, 3),
    ("tag_warpdrive_default", AT_2000 + BF16, 3),
    ("tag_warpdrive_default", AT_2000 + BF16 + OBS16, 3),
    # 5: runners act but are not trained, as in WarpDrive's shipped Tag config.
    ("tag_warpdrive_default", AT_2000 + ["policies.runner.train=false"], 3),
    # 6: PPO, 2 epochs x 4 minibatches, shared torso, bf16 (the shipped config);
    # 7: the same in float32 with separate actor and critic torsos.
    ("tag_2000_envs", [], 3),
    ("tag_2000_envs", F32_SEPARATE, 3),
    # 8-9 (run them with --backends cuda): cases 3 and 7 with the model written with
    # plain nn.Dense layers (before fused heads and the row-blocked float32 weight
    # gradient), for the side-by-side.
    ("tag_warpdrive_default", AT_2000 + BF16 + DENSE, 3),
    ("tag_2000_envs", F32_SEPARATE + DENSE, 3),
]
SMALL_CASES = [
    ("tag_warpdrive_default", ["num_envs=8", "num_steps=20"], 2),
    ("tag_small_cpu", [], 5),
]


def timed_calls(compiled: Any, state: Any, repeats: int
                ) -> tuple[Any, dict, dict, list[float]]:
    """The first call of `compiled` from `state` (its metrics: the first
    updates'), then `repeats` timed calls (wall seconds, block_until_ready);
    returns (the last state, the first and the last call's metrics, the times)."""
    state, first = compiled(state)
    jax.block_until_ready((state, first))
    times, m = [], first
    for _ in range(repeats):
        t = time.perf_counter()
        state, m = compiled(state)
        jax.block_until_ready((state, m))
        times.append(time.perf_counter() - t)
    return state, first, m, times


def rollout_seconds(trainer: Any, state: Any, updates: int, repeats: int) -> float:
    """Where the time goes: seconds per update of `updates` rollouts alone
    (no update between them), the median of `repeats` calls after a warm-up."""
    def rollouts(s):
        def body(s, k):
            envs, _, traj = trainer.rollout(s, k)
            return s.replace(envs=s.envs.replace(env_state=envs.env_state, obs=envs.obs)), \
                traj.reward.mean()
        return jax.lax.scan(body, s, jax.random.split(s.key, updates))

    roll = jit(rollouts, trainer.config.deterministic).lower(state).compile()
    jax.block_until_ready(roll(state))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(roll(state))
        times.append(time.perf_counter() - t)
    return statistics.median(times) / updates


def bench_case(config_name: str, overrides: list[str], backend: str, updates: int,
               repeats: int, deterministic: bool = True) -> dict:
    config = load_config(config_name, [*overrides, f"backend={backend}",
                                       f"deterministic={str(deterministic).lower()}"])
    trainer = build_trainer(config)
    batch = trainer.derived.batch_env_steps
    state = jax.jit(trainer.init)(jax.random.PRNGKey(0))
    run = jit(lambda s: trainer.run(s, updates), config.deterministic, donate_argnums=0)
    t = time.perf_counter()
    compiled = run.lower(state).compile()
    compile_s = time.perf_counter() - t
    state, _, m, times = timed_calls(compiled, state, repeats)  # the first call: a warm-up
    sec = statistics.median(times)
    env = trainer.env
    # Model FLOPs: the policy/value matmuls of one update (rollout forward
    # passes, loss forward + backward), counted from the program's jaxpr.
    flops = matmul_flops(lambda s: trainer.run(s, 1), state)
    kind = jax.devices()[0].device_kind
    mfu = model_flops_utilization(flops, sec / updates, kind)

    rollout_s = rollout_seconds(trainer, state, updates, 1)
    return {
        "config": config_name, "overrides": overrides, "backend": env.backend,
        "sampler": config.sampler, "algorithm": config.algorithm,
        "deterministic": config.deterministic,
        "num_envs": config.num_envs, "num_agents": env.num_agents,
        "num_steps": config.num_steps, "batch_env_steps": batch,
        "epochs": trainer.derived.epochs, "minibatches": trainer.derived.minibatches,
        "hidden_sizes": list(config.policy(next(iter(trainer.groups))).hidden_sizes),
        "model": config.policy(next(iter(trainer.groups))).model,
        "rollout": trainer.rollout_path, "recurrent_learner": dict(trainer.recurrent_learner),
        "updates_per_call": updates, "repeats": repeats, "compile_s": compile_s,
        "seconds_per_update": sec / updates,
        "rollout_seconds_per_update": rollout_s,
        "env_steps_per_s": updates * batch / sec,
        "agent_steps_per_s": updates * batch * env.num_agents / sec,
        "times_s": times,
        "matmul_flops_per_update": flops,
        "matmul_tflops_per_s": sum(flops.values()) / (sec / updates) / 1e12,
        "mfu": mfu,
        # every group's losses finite (Tag's files so far: the taggers' alone)
        "losses_finite": all(bool(jax.numpy.isfinite(v).all()) for k, v in m.items()
                             if k.endswith("/loss")),
    }


def _percent(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_bench_arguments(ap, "experiments/results/bench_train.json", "CPU-sized cases",
                        repeats=3)
    ap.add_argument("--cases", default=None, help="comma list of case indices (default: all)")
    ap.add_argument("--config", default=None,
                    help="a shipped config to time instead of the cases (with --variants: "
                         "its override sets), --updates updates per timed call")
    ap.add_argument("--updates", type=int, default=50)
    ap.add_argument("--variants", default=None,
                    help="';'-separated override sets, each run on every case and backend "
                         "(e.g. 'minibatch_layout=envs;minibatch_layout=samples')")
    ap.add_argument("--nondeterministic", action="store_true",
                    help="compile with deterministic=false (XLA:GPU's faster atomics; the "
                         "cost of determinism: experiments/bench_scaling.py --part train)")
    args = ap.parse_args()
    backends = bench_backends(args.backends, jaxwarp.gpu_available())
    cases = SMALL_CASES if args.small or not jaxwarp.gpu_available() else GPU_CASES
    if args.cases:
        cases = [cases[int(i)] for i in args.cases.split(",")]
    if args.config:
        cases = [(args.config, [], args.updates)]
    results = []
    meta = {"device": str(jax.devices()[0]), "device_kind": jax.devices()[0].device_kind,
            "jax": jax.__version__, "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    meta.update(run_meta())  # commit, command, device
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    device = device_name(jax.devices()[:1])
    if args.variants:
        cases = [(name, [*overrides, *v.split()], updates) for name, overrides, updates in cases
                 for v in args.variants.split(";")]
    for name, overrides, updates in cases:
        row = {}
        for backend in backends:
            r = bench_case(name, overrides, backend, updates, args.repeats,
                           not args.nondeterministic)
            results.append(r)
            row[backend] = r["env_steps_per_s"]
            print(f"{name:22s} {' '.join(overrides):40s} {r['algorithm']} {r['num_envs']:5d} envs "
                  f"{backend:4s}: {rate_text(r['env_steps_per_s'], r['num_agents'], device)} "
                  f"({r['seconds_per_update'] * 1e3:8.1f} ms/update, rollout "
                  f"{r['rollout_seconds_per_update'] * 1e3:6.1f} ms, compile "
                  f"{r['compile_s']:.1f} s, matmuls {r['matmul_tflops_per_s']:.1f} TFLOP/s, "
                  f"MFU {_percent(r['mfu'])})", flush=True)
        if len(row) == 2:
            a, b = backends
            print(f"{'':70s} {a}/{b} = {row[a] / row[b]:.2f}x", flush=True)
        # Written after every case so that a cut-off run keeps what it measured.
        Path(args.out).write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
