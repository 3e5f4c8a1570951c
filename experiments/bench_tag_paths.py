"""Tag (continuous) at 2000 envs: the CUDA kernel against its pure-JAX twin,
side by side in one process, at `warpdrive_default` (10 + 100 agents) and
`large` (50 + 950).

Times each in a jitted `lax.scan` of env steps, in two modes:

* ``protocol``: each step's actions are a hash of the previous step's
  observations (every element is read), so no backend can skip work a policy
  would need (docs/decisions.md, "Benchmarks and protocol");
* ``hashed``: actions hashed from the step index on the device, the kernel
  alone (labelled as such: a custom call cannot be partly dropped, pure JAX
  can).

With ``--grid-variant`` it also times the kernel with the grid neighbour
search where the default would scan (kind ``contract_grid``).

The earlier hand-written Tag kernel was deleted once this one was faster at
both sizes; their last side-by-side run (this script before the deletion)
is experiments/results/bench_tag_paths_vs_handwritten_h100.json.

    python experiments/bench_tag_paths.py --out experiments/results/bench_tag_paths_h100.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from bench_env import bytes_per_env_step, measure_bandwidth  # same folder

from jaxwarp.benchmark import protocol_actions
from jaxwarp.envs import tag_continuous as tc
from jaxwarp.units import device_name, rate_text

CASES = [("warpdrive_default", 2000, 200), ("large", 2000, 40)]


def make_env(kind: str, config: str):
    params = tc.TagContinuousParams(**tc.CONFIGS[config])
    if kind == "contract_grid":  # the grid search at any size (same lists as the scan)
        saved, tc.GRID_MIN_AGENTS = tc.GRID_MIN_AGENTS, 1  # read when the env is made
        try:
            return tc.TagContinuous(params, backend="cuda")
        finally:
            tc.GRID_MIN_AGENTS = saved
    return tc.TagContinuous(params, backend="jax" if kind == "jax" else "cuda")


def rollout_fn(env, num_envs: int, steps: int, protocol: bool):
    nvec = env.action_space.nvec

    def rollout(state, obs, key, t0):
        def body(carry, t):
            state, obs, key, acc = carry
            key, k_step = jax.random.split(key)
            a = protocol_actions(t, obs if protocol else None, nvec,
                                 (num_envs, env.num_agents))
            obs, state, reward, done, _ = env.step(k_step, state, a)
            return (state, obs, key, acc + reward.sum() + done.sum()), None

        ts = t0 + jnp.arange(steps, dtype=jnp.int32)
        (state, obs, key, acc), _ = jax.lax.scan(body, (state, obs, key, jnp.float32(0)), ts)
        return state, obs, key, acc

    return rollout


def time_env(env, num_envs: int, steps: int, protocol: bool, repeats: int) -> dict:
    obs, state = jax.jit(env.reset, static_argnums=1)(jax.random.key(0), num_envs)
    run = jax.jit(rollout_fn(env, num_envs, steps, protocol), donate_argnums=(0, 1))
    t0 = time.perf_counter()
    compiled = run.lower(state, obs, jax.random.key(1), jnp.int32(0)).compile()
    compile_s = time.perf_counter() - t0
    key = jax.random.key(1)
    state, obs, key, acc = compiled(state, obs, key, jnp.int32(0))
    jax.block_until_ready(acc)
    times = []
    for r in range(repeats):
        t0 = time.perf_counter()
        state, obs, key, acc = compiled(state, obs, key, jnp.int32((r + 1) * steps))
        jax.block_until_ready((state, obs, acc))
        times.append(time.perf_counter() - t0)
    sec = statistics.median(times)
    return dict(seconds_per_call=sec, env_steps_per_s=num_envs * steps / sec,
                compile_s=compile_s, hlo_custom_calls=compiled.as_text().count("custom-call"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-jax", action="store_true", help="skip the pure-JAX twin")
    ap.add_argument("--out", default="experiments/results/bench_tag_paths.json")
    ap.add_argument("--grid-variant", action="store_true",
                    help="also time the contract env with the grid search where it would "
                         "scan (kind contract_grid)")
    ap.add_argument("--configs", default=",".join(c for c, _, _ in CASES))
    args = ap.parse_args()
    unknown = set(args.configs.split(",")) - {c for c, _, _ in CASES}
    if unknown:
        ap.error(f"--configs: unknown {sorted(unknown)}; expected some of "
                 f"{[c for c, _, _ in CASES]}")
    device = jax.devices()[0]
    bw = measure_bandwidth(device)
    print(f"device {device.device_kind}: copy bandwidth {bw / 1e9:.0f} GB/s", flush=True)
    rows = []
    for config, envs, steps in CASES:
        if config not in args.configs.split(","):
            continue
        kinds = ["contract"] + ([] if args.no_jax else ["jax"])
        if args.grid_variant and not tc._use_grid(tc.TagContinuousParams(**tc.CONFIGS[config])):
            kinds.insert(1, "contract_grid")
        for protocol in (True, False):
            for kind in kinds:
                env = make_env(kind, config)
                try:
                    r = time_env(env, envs, steps, protocol, args.repeats)
                except Exception as exc:
                    print(f"{config} {kind} failed: {exc!r:.300}", flush=True)
                    continue
                p = env.params
                r.update(config=config, kind=kind, num_envs=envs, num_agents=p.num_agents,
                         agent_steps_per_s=r["env_steps_per_s"] * p.num_agents,
                         obs_dim=p.obs_dim, steps_per_call=steps,
                         actions="protocol (read previous obs)" if protocol
                         else "hashed on device (kernel alone)",
                         roofline_fraction=r["env_steps_per_s"]
                         * bytes_per_env_step(p.num_agents, p.obs_dim) / bw)
                rows.append(r)
                print(f"{config:18s} {envs:5d} envs {r['actions']:32s} {kind:12s} "
                      f"{rate_text(r['env_steps_per_s'], p.num_agents, device_name([device]))}"
                      f"  roofline "
                      f"{100 * r['roofline_fraction']:5.1f}%  compile {r['compile_s']:.1f}s",
                      flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dict(device=device.device_kind, jax=jax.__version__,
                                   bandwidth_bytes_per_s=bw, results=rows),
                              indent=1))
    print("wrote", out)


if __name__ == "__main__":
    main()
