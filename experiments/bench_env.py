"""Env-only throughput of Tag (continuous), backends side by side in one run.

For each configuration and backend: reset, then one jitted `lax.scan` of T
steps (auto-reset inside `step`, state and obs donated; each step's actions
are a hash of the previous step's observations, jaxwarp.benchmark's
protocol, so no backend can skip observation work a policy would need;
`--hashed`: actions from the step index alone, for the kernel alone);
compile time is measured separately, a warm-up call is excluded,
and each timed call ends with `block_until_ready`. Reports env-steps/s,
agent-steps/s, the kernel/JAX ratio and the fraction of the memory-bandwidth
roofline (bytes per env-step below, bandwidth measured in the same run).

    python experiments/bench_env.py                 # GPU sizes (cuda vs jax)
    python experiments/bench_env.py --small         # sizes that suit a CPU
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxwarp
from jaxwarp.benchmark import (
    add_bench_arguments,
    bench_backends,
    protocol_actions,
    run_meta,
    write_result,
)
from jaxwarp.units import device_name, rate_text

# 10,000 agents per env: `large` with 500 taggers and 9,500 runners in an arena
# scaled to keep its density (tests/test_tag_continuous*.py, case agents_10000).
AGENTS_10000 = dict(num_taggers=500, num_runners=9500, grid_length=316.0)
# (config name, num_envs, steps per timed call, param overrides)
GPU_CASES = [("warpdrive_default", 100, 200, {}), ("warpdrive_default", 1000, 200, {}),
             ("warpdrive_default", 2000, 200, {}), ("large", 500, 50, {}),
             ("large", 2000, 50, {}), ("large", 200, 20, AGENTS_10000)]
SMALL_CASES = [("warpdrive_default", 8, 20, {}), ("warpdrive_default", 32, 20, {})]


def bytes_per_env_step(num_agents: int, obs_dim: int, obs_bytes: int = 4) -> int:
    """Fewest bytes one env-step must move through memory.

    Per agent: state read and written (x, y, speed, direction, acceleration,
    still_in_game, episode_return: 7 x 4 B each way), actions read (2 x 4 B),
    observation written (obs_dim x 4 B), reward written (4 B). Per env:
    timestep and runners-left read and written (16 B), done written (1 B).
    """
    return num_agents * (2 * 7 * 4 + 2 * 4 + obs_dim * obs_bytes + 4) + 17


def measure_bandwidth(device: jax.Device, nbytes: int = 1 << 30) -> float:
    """Device memory bandwidth (bytes/s, read + write) of an elementwise copy."""
    x = jax.device_put(jnp.ones((nbytes // 4,), jnp.float32), device)
    f = jax.jit(lambda a: a + 1.0)
    f(x).block_until_ready()
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        f(x).block_until_ready()
        times.append(time.perf_counter() - t0)
    return 2 * nbytes / statistics.median(times)


# XLA:GPU options that capture the whole scan (while loop included) in one
# CUDA graph instead of launching kernel by kernel (docs/decisions.md, "Kernels": measure both).
COMMAND_BUFFER_OPTIONS = {
    "xla_gpu_enable_command_buffer": "FUSION,CUSTOM_CALL,WHILE,CONDITIONAL",
    "xla_gpu_graph_min_graph_size": 1,
}


def bench_one(config: str, backend: str, num_envs: int, steps: int, repeats: int,
              device: jax.Device, unroll: int = 1, command_buffer: bool = False,
              protocol: bool = True, params: dict | None = None,
              obs_dtype: str = "float32") -> dict:
    env = jaxwarp.make("tag_continuous", backend=backend, config=config, obs_dtype=obs_dtype,
                       **(params or {}))
    p = env.params
    n = env.num_agents
    nvec = env.action_space.nvec

    def rollout(state, obs, key, t0):
        def body(carry, t):
            state, obs, key, ret = carry
            key, k_step = jax.random.split(key)
            actions = protocol_actions(t, obs if protocol else None, nvec, (num_envs, n))
            obs, state, reward, done, _ = env.step(k_step, state, actions)
            return (state, obs, key, ret + reward.sum()), None

        ts = t0 + jnp.arange(steps, dtype=jnp.int32)
        (state, obs, key, ret), _ = jax.lax.scan(body, (state, obs, key, jnp.float32(0)), ts,
                                                 unroll=unroll)
        return state, obs, key, ret

    with jax.default_device(device):
        obs, state = jax.jit(env.reset, static_argnums=1)(jax.random.key(0), num_envs)
        key = jax.random.key(1)
        run = jax.jit(rollout, donate_argnums=(0, 1))
        t0 = time.perf_counter()
        lowered = run.lower(state, obs, key, jnp.int32(0))
        compiled = lowered.compile(COMMAND_BUFFER_OPTIONS if command_buffer else None)
        compile_s = time.perf_counter() - t0
        state, obs, key, ret = compiled(state, obs, key, jnp.int32(0))  # warm-up
        jax.block_until_ready(ret)
        times = []
        for r in range(repeats):
            t0 = time.perf_counter()
            state, obs, key, ret = compiled(state, obs, key, jnp.int32((r + 1) * steps))
            jax.block_until_ready((state, obs, ret))
            times.append(time.perf_counter() - t0)
    sec = statistics.median(times)
    env_steps = num_envs * steps / sec
    return dict(config=config, backend=backend, num_envs=num_envs, num_agents=n,
                scan_unroll=unroll, command_buffer=command_buffer,
                actions="protocol (read previous obs)" if protocol
                else "hashed on device (kernel alone)",
                obs_dim=p.obs_dim, steps_per_call=steps, repeats=repeats,
                seconds_per_call=sec, env_steps_per_s=env_steps,
                agent_steps_per_s=env_steps * n, compile_s=compile_s,
                obs_dtype=obs_dtype,
                bytes_per_env_step=bytes_per_env_step(n, p.obs_dim,
                                                      jnp.dtype(obs_dtype).itemsize))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_bench_arguments(ap, "experiments/results/bench_env.json", "CPU-sized configurations")
    ap.add_argument("--hashed", action="store_true",
                    help="actions hashed from the step index (the kernel alone), not read "
                         "from the observations")
    ap.add_argument("--obs-dtype", default="float32", choices=["float32", "bfloat16"],
                    help="the env's obs_dtype (bfloat16: half the observation bytes)")
    ap.add_argument("--configs", default=None,
                    help="comma-separated config names: only these cases")
    ap.add_argument("--variants", action="store_true",
                    help="also time warpdrive_default at 2000 envs with the scan unrolled "
                         "8x and with whole-loop CUDA-graph capture")
    args = ap.parse_args()

    gpu = jaxwarp.gpu_available()
    backends = bench_backends(args.backends, gpu)
    cases = SMALL_CASES if args.small else GPU_CASES
    if args.configs:
        cases = [c for c in cases if c[0] in args.configs.split(",")]
    device = jax.devices("gpu")[0] if gpu else jax.devices("cpu")[0]
    bandwidth = measure_bandwidth(device, (1 << 30) if gpu else (1 << 26))
    print(f"device: {device.device_kind}; measured copy bandwidth {bandwidth / 1e9:.0f} GB/s")
    names = {d.platform: device_name([d]) for d in (jax.devices("cpu")[0], device)}

    results = []
    for config, num_envs, steps, params in cases:
        for backend in backends:
            dev = jax.devices("cpu")[0] if backend == "cpu" else device
            try:
                r = bench_one(config, backend, num_envs, steps, args.repeats, dev,
                              protocol=not args.hashed, params=params,
                              obs_dtype=args.obs_dtype)
            except Exception as exc:  # the pure-JAX twin's N x N arrays at 10,000 agents
                results.append(dict(config=config, backend=backend, num_envs=num_envs,
                                    params=params, error=repr(exc)[:300]))
                print(f"{config:18s} envs={num_envs:5d} {backend:5s} failed: {exc!r:.200}",
                      flush=True)
                continue
            r["params"] = params
            r["roofline_fraction"] = (r["env_steps_per_s"] * r["bytes_per_env_step"]
                                      / bandwidth)
            results.append(r)
            print(f"{config:18s} envs={num_envs:5d} {backend:5s} "
                  f"{rate_text(r['env_steps_per_s'], r['num_agents'], names[dev.platform])} "
                  f"roofline {100 * r['roofline_fraction']:5.1f}% "
                  f"compile {r['compile_s']:.1f}s", flush=True)
    variants = []
    if args.variants and gpu:
        for unroll, cb in ((8, False), (1, True), (8, True)):
            for backend in backends:
                try:
                    r = bench_one("warpdrive_default", backend, 2000, 200, args.repeats,
                                  device, unroll=unroll, command_buffer=cb,
                                  protocol=not args.hashed)
                except Exception as exc:  # an XLA build may reject the options
                    r = dict(backend=backend, scan_unroll=unroll, command_buffer=cb,
                             error=repr(exc)[:300])
                variants.append(r)
                rate = r.get("env_steps_per_s")
                print(f"variant unroll={unroll} command_buffer={cb} {backend:5s} "
                      + (rate_text(rate, r["num_agents"], names[device.platform]) if rate
                         else r["error"]),
                      flush=True)

    # kernel / JAX ratio per case
    by_case: dict = {}
    timed = [r for r in results if "error" not in r]
    for r in timed:
        by_case.setdefault((r["config"], r["num_envs"]), {})[r["backend"]] = r
    ratios = []
    for (config, num_envs), rs in by_case.items():
        kernel = rs.get("cuda") or rs.get("cpu")
        if kernel and "jax" in rs:
            ratio = kernel["env_steps_per_s"] / rs["jax"]["env_steps_per_s"]
            ratios.append(dict(config=config, num_envs=num_envs, kernel=kernel["backend"],
                               kernel_over_jax=ratio))

    print(f"\nOn {names[device.platform]}" + (" (backend cpu: on the host)" if gpu else "") + ":\n")
    print("| config | envs | agents | backend | M env-steps/s | G agent-steps/s "
          "| roofline | compile s | kernel/JAX |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in timed:
        ratio = next((x["kernel_over_jax"] for x in ratios if x["config"] == r["config"]
                      and x["num_envs"] == r["num_envs"] and x["kernel"] == r["backend"]), None)
        print(f"| {r['config']} | {r['num_envs']} | {r['num_agents']} | {r['backend']} | "
              f"{r['env_steps_per_s'] / 1e6:.3f} | {r['agent_steps_per_s'] / 1e9:.3f} | "
              f"{100 * r['roofline_fraction']:.1f}% | {r['compile_s']:.1f} | "
              f"{'' if ratio is None else f'{ratio:.2f}x'} |")

    print()
    write_result(args.out, dict(
        device=device.device_kind, platform=device.platform, jax=jax.__version__,
        python=platform.python_version(), measured_bandwidth_bytes_per_s=bandwidth,
        results=results, kernel_over_jax=ratios, variants=variants, meta=run_meta()))


if __name__ == "__main__":
    main()
