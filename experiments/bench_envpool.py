"""Host-loop throughput: EnvPool CartPole-v1 / Pendulum-v1 vs jaxwarp's Gymnasium adapter.

Both driven from the same Python loop, as a PyTorch/NumPy trainer would:
NumPy actions in, NumPy observations out, one step call per batch. EnvPool
in sync mode (``batch_size == num_envs``; its default thread count, one per
core, and one thread); jaxwarp
through `jaxwarp.adapters.gymnasium.JaxwarpVectorEnv` (backend cpu, one
jitted call per step, copy=True: writable arrays like EnvPool's; and
copy=False: read-only views; both report infos["final_obs"], which costs a
second env step on steps where some env finished; and copy=True with
final_obs=False). For context, the adapter's jitted step alone
(device actions, no NumPy conversion, no host checks, one sync per run).
Actions are uniform random, drawn before timing and cycled. 50 warm-up steps
(jaxwarp's compile time reported apart); each figure is the median of 5
timed runs of `steps` steps, the runs of all implementations interleaved.

--env picks the task: ``CartPole-v1`` (default; jaxwarp ``cartpole``, both
take Discrete(2) actions, the same int32 arrays go to both) or
``Pendulum-v1`` (jaxwarp ``pendulum``). Pendulum: same dynamics, different
action space. EnvPool's (Gymnasium's) Pendulum-v1 takes a continuous torque,
Box(-2, 2, (1,)), so its actions are uniform float32 in [-2, 2], shape
[envs, 1]; jaxwarp's pendulum takes one of 5 discrete torques (-2 .. 2),
Discrete(5), so its actions are uniform int32 in [0, 5), shape [envs]. The
output's metadata says so.

    pip install envpool==1.2.5
    python experiments/bench_envpool.py --out experiments/results/bench_envpool_cpu.json
    python experiments/bench_envpool.py --env Pendulum-v1 \\
        --out experiments/results/bench_envpool_pendulum_cpu.json
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

import jax
import numpy as np

import jaxwarp
from jaxwarp.adapters.gymnasium import JaxwarpVectorEnv
from jaxwarp.benchmark import run_meta, write_result
from jaxwarp.units import rate_text

SIZES = (64, 1024, 8192)
STEPS = {64: 2000, 1024: 1000, 8192: 200}  # per timed run
POOL = 16  # distinct action batches, cycled

# --env: EnvPool task id -> jaxwarp env name and the two sides' actions.
ENVS = {
    "CartPole-v1": {
        "jaxwarp": "cartpole",
        "envpool_actions": "Discrete(2): uniform int32 in {0, 1}, shape [envs]",
        "jaxwarp_actions": "Discrete(2): the same int32 arrays as EnvPool's",
    },
    "Pendulum-v1": {
        "jaxwarp": "pendulum",
        "envpool_actions": "Box(-2, 2, (1,)) continuous torque: uniform float32 in [-2, 2], "
                           "shape [envs, 1]",
        "jaxwarp_actions": "Discrete(5) (torques -2, -1, 0, 1, 2): uniform int32 in [0, 5), "
                           "shape [envs]",
        "note": "same dynamics, different action space: EnvPool's Pendulum-v1 takes a "
                "continuous torque, jaxwarp's pendulum one of 5 discrete torques",
    },
}


def draw_actions(env_id: str, n: int, rng: np.random.Generator
                 ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(EnvPool's, jaxwarp's) pools of POOL action batches for n envs."""
    if env_id == "CartPole-v1":  # one pool for both (the original protocol)
        acts = [rng.integers(0, 2, n).astype(np.int32) for _ in range(POOL)]
        return acts, acts
    if env_id == "Pendulum-v1":
        ep = [rng.uniform(-2.0, 2.0, (n, 1)).astype(np.float32) for _ in range(POOL)]
        jw = [rng.integers(0, 5, n).astype(np.int32) for _ in range(POOL)]
        return ep, jw
    raise ValueError(f"unknown env {env_id!r}; choose from {sorted(ENVS)}")


def timed_run(step, actions: list, steps: int, finish=lambda out: None) -> float:
    """Env-steps per second of `steps` calls of step(actions[i]), cycled."""
    t = time.perf_counter()
    out = None
    for i in range(steps):
        out = step(actions[i % len(actions)])
    finish(out)
    return actions[0].shape[0] * steps / (time.perf_counter() - t)


def make_envpool(env_id: str, n: int, threads: int):
    import envpool

    env = envpool.make(env_id, env_type="gymnasium", num_envs=n, batch_size=n, seed=0,
                       num_threads=threads)
    env.reset()
    meta = {"num_threads": threads or "0 (EnvPool's default: one per core)",
            "version": envpool.__version__}
    return env.step, None, meta, env.close


def make_jaxwarp_gym(name: str, n: int, copy: bool, first_actions: np.ndarray,
                     final_obs: bool = True):
    # Same-step autoreset with the final observation in infos: the mode the
    # published figures were measured in (Gymnasium's default is NEXT_STEP).
    envs = JaxwarpVectorEnv(jaxwarp.make(name, backend="cpu"), n, copy=copy,
                            final_obs=final_obs, autoreset_mode="same_step")
    t = time.perf_counter()
    envs.reset(seed=0)
    envs.step(first_actions)
    return envs.step, None, {"compile_s": time.perf_counter() - t}, envs.close


def make_jitted_step(name: str, n: int):
    """The adapter's jitted step alone (same function, same donation), device
    actions, synced once at the end of a run."""
    from jaxwarp.adapters._batched import BatchedEnv

    b = BatchedEnv(jaxwarp.make(name, backend="cpu"), n)
    b.reset(seed=0)
    return b.step, b.device, {}, b.close


def bench_size(env_id: str, n: int, envpool_actions: list[np.ndarray],
               jaxwarp_actions: list[np.ndarray], steps: int, envpool_threads: list[int]
               ) -> dict:
    """Every implementation at n envs; their timed runs interleaved (run r of each,
    then run r + 1 of each), so a change of machine load hits all alike."""
    name_jw = ENVS[env_id]["jaxwarp"]
    impls = {}
    for threads in envpool_threads:
        try:
            impls[f"envpool_threads{threads}"] = make_envpool(env_id, n, threads)
        except ImportError as e:
            print(f"envpool not importable: {e}")
    impls["jaxwarp_gym"] = make_jaxwarp_gym(name_jw, n, True, jaxwarp_actions[0])
    impls["jaxwarp_gym_nocopy"] = make_jaxwarp_gym(name_jw, n, False, jaxwarp_actions[0])
    impls["jaxwarp_gym_no_final_obs"] = make_jaxwarp_gym(name_jw, n, True, jaxwarp_actions[0],
                                                         final_obs=False)
    impls["jaxwarp_jitted_step"] = make_jitted_step(name_jw, n)
    args = {}
    for name, (step, device, _, _) in impls.items():
        actions = envpool_actions if name.startswith("envpool") else jaxwarp_actions
        acts = actions if device is None else [jax.device_put(a, device) for a in actions]
        finish = jax.block_until_ready if device is not None else (lambda out: None)
        args[name] = (step, acts, finish)
        for i in range(50):  # warm-up
            step(acts[i % len(acts)])
    runs: dict[str, list[float]] = {name: [] for name in impls}
    for _ in range(5):
        for name, (step, acts, finish) in args.items():
            runs[name].append(timed_run(step, acts, steps, finish))
    row = {}
    for name, (_, _, meta, close) in impls.items():
        close()
        row[name] = {"env_steps_per_s": statistics.median(runs[name]), "runs": runs[name],
                     **meta}
    return row


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


LABELS = {"envpool_threads0": "EnvPool, default threads", "envpool_threads1": "EnvPool, 1 thread",
          "jaxwarp_gym": "jaxwarp Gymnasium adapter (copy=True)",
          "jaxwarp_gym_nocopy": "jaxwarp Gymnasium adapter (copy=False)",
          "jaxwarp_jitted_step": "jaxwarp jitted step alone (no NumPy, no per-step sync)"}


def markdown_table(results: list[dict], env_id: str = "CartPole-v1",
                   device: str | None = None) -> str:
    """Env-steps/s (millions), one row per implementation, one column per size
    (one agent per env: agent-steps/s are the same figures)."""
    sizes = [r["num_envs"] for r in results]
    keys = [k for k in LABELS if any(k in r for r in results)]
    lines = [f"{env_id}, 1 agent per env (agent-steps/s = env-steps/s)"
             + (f", on {device}" if device else "") + ":", "",
             f"| {env_id}, M env-steps/s | " + " | ".join(f"{n} envs" for n in sizes) + " |",
             "|---|" + "---:|" * len(sizes)]
    for k in keys:
        cells = [f"{r[k]['env_steps_per_s'] / 1e6:.2f}" if "env_steps_per_s" in r.get(k, {})
                 else "n/a" for r in results]
        lines.append(f"| {LABELS[k]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=sorted(ENVS), default="CartPole-v1",
                        help="EnvPool task (jaxwarp: cartpole / pendulum); see the docstring "
                             "for Pendulum's action spaces")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--sizes", type=int, nargs="*", default=list(SIZES))
    parser.add_argument("--envpool-threads", type=int, nargs="*", default=[0, 1],
                        help="EnvPool num_threads settings to time (0: its default)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    load_before = os.getloadavg()
    device = f"{cpu_name()}, {os.cpu_count()} cores"
    results = []
    for n in args.sizes:
        steps = STEPS.get(n, max(100, 200_000 // n))
        envpool_actions, jaxwarp_actions = draw_actions(args.env, n, rng)
        row = {"num_envs": n, "steps_per_run": steps,
               **bench_size(args.env, n, envpool_actions, jaxwarp_actions, steps,
                            args.envpool_threads)}
        results.append(row)
        print(f"{n:6d} envs on {device}: " + "; ".join(
            f"{k} {rate_text(v['env_steps_per_s'], 1)}" for k, v in row.items()
            if isinstance(v, dict) and "env_steps_per_s" in v), flush=True)
    spec = ENVS[args.env]
    acts = "numpy int32 actions" if args.env == "CartPole-v1" else \
        "numpy actions (EnvPool: float32 torques, jaxwarp: int32 torque indices)"
    meta = {"cpu": cpu_name(), "cores": os.cpu_count(), "python": platform.python_version(),
            "jax": jax.__version__, "numpy": np.__version__,
            "loadavg_1_5_15_before_after": [load_before, os.getloadavg()],
            "env": f"{args.env} / {spec['jaxwarp']}",
            "actions": {"envpool": spec["envpool_actions"], "jaxwarp": spec["jaxwarp_actions"]},
            **({"note": spec["note"]} if "note" in spec else {}),
            "protocol": f"same Python loop, {acts} (random, 16 batches cycled), "
                        "one step call per batch, 50 warm-up steps, median of 5 runs interleaved "
                        "across implementations"}
    meta.update(run_meta())  # commit, command, device
    out = {"env": args.env, "meta": meta, "results": results}
    print(markdown_table(results, args.env, device))
    if args.out:
        write_result(args.out, out, indent=1, end="\n")


if __name__ == "__main__":
    main()
