"""What the host round trip costs: the torch adapter's step loop vs a jitted lax.scan.

    pip install torch          # a CUDA build of torch for --backend cuda
    python experiments/bench_torch_adapter.py \\
        --out experiments/results/bench_torch_adapter_h100.json
    # smoke test without a GPU:
    python experiments/bench_torch_adapter.py --backend cpu --envs cartpole:64 \\
        mpe_simple_spread:32 --steps 20 --runs 2

For each env (default: ``cartpole`` at 4096 envs, ``mpe_simple_spread`` at
2048 envs) on one backend (default ``cuda``), two ways of stepping the same
jaxwarp env object:

(i)  ``torch_loop``: a Python loop of `jaxwarp.adapters.torch.TorchVectorEnv.step`,
     one jitted call per step, as a PyTorch trainer would drive it. The actions
     are int32 torch tensors already on the env's device (uniform in each
     head's range, `POOL` batches drawn up front with torch, cycled), so a step
     pays only the adapter: DLPack in, one jitted call, DLPack out. Nothing
     syncs inside the loop; the run ends with ``torch.cuda.synchronize()`` (on
     cuda) and a ``jax.block_until_ready`` of the env state.
(ii) ``jitted_scan``: the same number of steps inside one jitted
     ``jax.lax.scan`` (the actions drawn on the device with ``jax.random``
     inside the scan body; key, state and obs carried; state and obs donated),
     one call and one sync per run.

Each is warmed up (`--warmup` adapter steps; one scan call, whose time, the
compile, is reported apart as ``compile_s``), then timed `--runs` times
(runs of the two interleaved); the figure is the median. env-steps/s counts
envs x steps; agent-steps/s, envs x agents x steps. ``scan_over_torch`` is
the ratio of the two: what the per-step round trip through Python and
DLPack costs.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import jaxwarp
from jaxwarp.benchmark import run_meta, write_result
from jaxwarp.units import rate_text

DEFAULT_ENVS = ("cartpole:4096", "mpe_simple_spread:2048")
POOL = 16  # distinct action batches for the torch loop, cycled


def torch_actions(envs: Any, pool: int, seed: int) -> list:
    """`pool` int32 action tensors of shape ``(num_envs, *action_shape)`` on the
    env's device, each head h uniform in [0, nvec[h])."""
    import torch

    shape = (envs.num_envs, *envs.action_shape)
    nvec = np.broadcast_to(np.asarray(envs.nvec, np.float32),
                           envs.action_shape or (1,)).reshape(envs.action_shape)
    nvec_t = torch.as_tensor(np.array(nvec), device=envs.device)
    gen = torch.Generator(device=envs.device)
    gen.manual_seed(seed)
    out = []
    for _ in range(pool):
        u = torch.rand(shape, generator=gen, device=envs.device)
        a = torch.minimum((u * nvec_t).to(torch.int32), (nvec_t - 1).to(torch.int32))
        out.append(a.contiguous())
    return out


class TorchLoop:
    """(i): TorchVectorEnv.step in a Python loop, synced once per run."""

    def __init__(self, env: Any, num_envs: int, seed: int):
        import torch

        from jaxwarp.adapters.torch import TorchVectorEnv

        self.torch = torch
        self.envs = TorchVectorEnv(env, num_envs)
        self.envs.reset(seed=seed)
        self.actions = torch_actions(self.envs, POOL, seed)

    def sync(self) -> None:
        if self.envs.device.type == "cuda":
            self.torch.cuda.synchronize(self.envs.device)
        jax.block_until_ready(self.envs._batch.state)

    def run(self, steps: int) -> float:
        """Seconds for `steps` steps, synced at the end only."""
        acts, step = self.actions, self.envs.step
        t = time.perf_counter()
        for i in range(steps):
            step(acts[i % POOL])
        self.sync()
        return time.perf_counter() - t

    def close(self) -> None:
        self.envs.close()


class JittedScan:
    """(ii): `steps` steps in one jitted lax.scan, actions drawn inside."""

    def __init__(self, env: Any, num_envs: int, steps: int, seed: int):
        heads = len(env.action_space.nvec)
        nvec = jnp.asarray(np.asarray(env.action_space.nvec, np.int32))
        shape = (num_envs, env.num_agents, heads)

        def body(carry, _):
            key, state, obs = carry
            key, k_act, k_step = jax.random.split(key, 3)
            actions = jax.random.randint(k_act, shape, 0, nvec, dtype=jnp.int32)
            obs, state, _, _, _ = env.step(k_step, state, actions)
            return (key, state, obs), None

        def rollout(key, state, obs):
            return jax.lax.scan(body, (key, state, obs), None, length=steps)[0]

        self.fn = jax.jit(rollout, donate_argnums=(1, 2))
        key, k = jax.random.split(jax.random.key(seed))
        obs, state = jax.jit(env.reset, static_argnums=1)(k, num_envs)
        self.carry = (key, state, obs)
        t = time.perf_counter()
        self.carry = jax.block_until_ready(self.fn(*self.carry))  # compile + first run
        self.compile_s = time.perf_counter() - t

    def run(self, steps: int) -> float:
        t = time.perf_counter()
        self.carry = jax.block_until_ready(self.fn(*self.carry))
        return time.perf_counter() - t

    def close(self) -> None:
        self.carry = None


def bench_env(name: str, num_envs: int, backend: str, steps: int, runs: int, warmup: int,
              seed: int) -> dict:
    env = jaxwarp.make(name, backend=backend)
    loop = TorchLoop(env, num_envs, seed)
    for i in range(warmup):
        loop.envs.step(loop.actions[i % POOL])
    loop.sync()
    scan = JittedScan(env, num_envs, steps, seed)
    times: dict[str, list[float]] = {"torch_loop": [], "jitted_scan": []}
    for _ in range(runs):  # interleaved: a change of load hits both alike
        times["torch_loop"].append(loop.run(steps))
        times["jitted_scan"].append(scan.run(steps))
    row: dict[str, Any] = {"env": name, "num_envs": num_envs, "num_agents": int(env.num_agents),
                           "steps_per_run": steps, "torch_device": str(loop.envs.device)}
    for key, ts in times.items():
        rates = [num_envs * steps / t for t in ts]
        row[key] = {"env_steps_per_s": statistics.median(rates),
                    "agent_steps_per_s": statistics.median(rates) * int(env.num_agents),
                    "us_per_step": statistics.median(ts) / steps * 1e6, "runs": rates}
    row["jitted_scan"]["compile_s"] = scan.compile_s
    row["scan_over_torch"] = (row["jitted_scan"]["env_steps_per_s"]
                              / row["torch_loop"]["env_steps_per_s"])
    loop.close()
    scan.close()
    return row


def device_meta(backend: str) -> dict:
    import torch

    meta: dict[str, Any] = {"backend": backend, "python": platform.python_version(),
                            "jax": jax.__version__, "torch": torch.__version__,
                            "numpy": np.__version__}
    if backend == "cuda":
        d = jax.devices("gpu")[0]
        meta["device"] = d.device_kind
        meta["torch_cuda"] = torch.version.cuda
    else:
        meta["device"] = platform.processor() or platform.machine()
        meta["jax_device"] = str(jax.devices()[0])
    return meta


def parse_envs(specs: list[str]) -> list[tuple[str, int]]:
    out = []
    for s in specs:
        name, _, n = s.partition(":")
        if not n.isdigit() or int(n) < 1:
            raise SystemExit(f"--envs takes NAME:NUM_ENVS (e.g. cartpole:4096); got {s!r}")
        out.append((name, int(n)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cuda", choices=("cuda", "cpu", "jax"),
                        help="jaxwarp backend (default cuda; cpu for a smoke test)")
    parser.add_argument("--envs", nargs="+", default=list(DEFAULT_ENVS),
                        help="NAME:NUM_ENVS pairs (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=1000, help="steps per timed run")
    parser.add_argument("--runs", type=int, default=5, help="timed runs (median reported)")
    parser.add_argument("--warmup", type=int, default=50, help="adapter warm-up steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.backend == "cuda":
        import torch

        if not jaxwarp.gpu_available():
            raise SystemExit("--backend cuda needs a CUDA GPU and jaxwarp's CUDA library")
        if not torch.cuda.is_available():
            raise SystemExit("--backend cuda needs a CUDA build of torch "
                             f"(torch {torch.__version__} sees no GPU)")
    device = device_meta(args.backend)["device"]
    results = []
    for name, n in parse_envs(args.envs):
        row = bench_env(name, n, args.backend, args.steps, args.runs, args.warmup, args.seed)
        results.append(row)
        loop, scan = (rate_text(row[k]["env_steps_per_s"], row["num_agents"])
                      for k in ("torch_loop", "jitted_scan"))
        print(f"{name} x {n} ({args.backend} on {device}): torch loop {loop} "
              f"({row['torch_loop']['us_per_step']:.1f} us/step), jitted scan {scan} "
              f"({row['jitted_scan']['us_per_step']:.1f} us/step, compile "
              f"{row['jitted_scan']['compile_s']:.1f} s), scan / torch "
              f"{row['scan_over_torch']:.2f}x", flush=True)
    out = {"meta": {**device_meta(args.backend), **run_meta(),  # commit, command
                    "protocol": f"{args.steps} steps per run, {args.warmup} warm-up adapter "
                                f"steps + one warm-up scan call (compile_s), median of "
                                f"{args.runs} interleaved runs; torch loop: int32 torch "
                                f"actions on the env's device ({POOL} batches drawn up front, "
                                "cycled), one sync at the end of a run; scan: actions drawn "
                                "with jax.random inside the scan, state and obs donated; "
                                "env-steps = envs x steps"},
           "results": results}
    if args.out:
        write_result(args.out, out, indent=1, end="\n")


if __name__ == "__main__":
    main()
