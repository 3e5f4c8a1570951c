"""Launch-model ablation: the same Tag kernels, stepped from a Python loop with
a device sync every step (WarpDrive's execution model: one launch per step
from Python, then wait) versus fused in one XLA program (`lax.scan` over the
FFI custom call, no host round trip). Same GPU, same configuration, same
kernels, side by side in one process.

Part 1 (tag_continuous): the per-step path
dispatches the jitted step (the FFI custom call plus on-device action
sampling) from Python and calls `block_until_ready` after each step.

Part 2 (--pycuda; contract envs, e.g. WarpDrive's tag_gridworld): the very
same generated kernel three ways, all from the same reset and fed the same
pre-drawn keys and actions: launched by PyCUDA from a Python loop with a
context sync per step (WarpDrive's model, `jaxwarp.pycuda_bridge.PyCudaEnv`),
the jitted FFI step dispatched from a Python loop with a sync per step, and
one fused `lax.scan`. The final states of the PyCUDA and fused runs must be
identical (checked).

    python experiments/ablation_launch.py --out experiments/results/ablation_launch_h100.json
    python experiments/ablation_launch.py --pycuda --out experiments/results/ablation_pycuda_h100.json
"""

from __future__ import annotations

import argparse
import time

import jax

import jaxwarp
from jaxwarp.benchmark import run_meta, write_result

CASES = [("warpdrive_default", 100), ("warpdrive_default", 2000), ("large", 500)]
PYCUDA_CASES = [("tag_gridworld", "warpdrive_default", 100), ("tag_gridworld", "warpdrive_default", 2000),
                ("mpe_simple_tag", None, 2000), ("mpe_simple_tag", None, 20000)]


def pycuda_ablation(steps: int) -> list[dict]:
    import numpy as np

    from jaxwarp.core import key_data_of
    from jaxwarp.pycuda_bridge import PyCudaEnv, device_pointer

    results = []
    for name, config, num_envs in PYCUDA_CASES:
        env = jaxwarp.make(name, backend="cuda", config=config)
        key = jax.random.PRNGKey(0)
        ka, kk = jax.random.split(jax.random.PRNGKey(1))
        actions = env.action_space.sample(ka, (steps, num_envs, env.num_agents))
        keys = jax.vmap(key_data_of)(jax.random.split(kk, steps)).astype(jax.numpy.uint32)
        # The kernels read 3 words per key (key, index of the first env).
        keys3 = jax.numpy.concatenate([keys, jax.numpy.zeros((steps, 1), jax.numpy.uint32)], 1)
        jax.block_until_ready((actions, keys, keys3))

        # 1. PyCUDA: one launch + context sync per step, on raw pointers.
        pc = PyCudaEnv(env)
        pc.reset(key, num_envs)
        a0, k0 = device_pointer(actions), device_pointer(keys3)
        a_stride = actions[0].size * 4
        pc.step_pointers(k0, a0, key_words=3)  # warm-up (module load, first launch)
        pc.reset(key, num_envs)
        t = time.perf_counter()
        for i in range(steps):
            pc.step_pointers(k0 + 12 * i, a0 + a_stride * i, key_words=3)
        pycuda_s = time.perf_counter() - t

        # 2. The jitted FFI step from a Python loop, sync per step.
        reset = jax.jit(env.reset, static_argnums=1)
        step = jax.jit(env.step, donate_argnums=1)
        _, state = reset(key, num_envs)
        jax.block_until_ready(step(keys[0], state, actions[0]))
        _, state = reset(key, num_envs)
        jax.block_until_ready(state)
        key_list, action_list = list(keys), list(actions)  # sliced before timing
        jax.block_until_ready((key_list, action_list))
        t = time.perf_counter()
        for k, a in zip(key_list, action_list):
            out = step(k, state, a)
            state = out[1]
            jax.block_until_ready(out)
        loop_s = time.perf_counter() - t

        # 3. Fused: one lax.scan over the same keys and actions.
        def body(s, xs):
            k, a = xs
            obs, s, reward, done, _ = env.step(k, s, a)
            return s, reward[0, 0]

        fused = jax.jit(lambda s: jax.lax.scan(body, s, (keys, actions)))
        _, s0 = reset(key, num_envs)
        jax.block_until_ready(fused(s0))  # compile
        _, s0 = reset(key, num_envs)
        jax.block_until_ready(s0)
        t = time.perf_counter()
        final, _ = fused(s0)
        jax.block_until_ready(final)
        fused_s = time.perf_counter() - t

        same = all(np.array_equal(pc.numpy(getattr(pc.state, f.name)),
                                  np.asarray(getattr(final, f.name))) for f in env.spec.fields)
        r = {"env": name, "config": config, "num_envs": num_envs, "steps": steps,
             "num_agents": env.num_agents,
             "pycuda_loop_us_per_step": 1e6 * pycuda_s / steps,
             "jax_loop_us_per_step": 1e6 * loop_s / steps,
             "fused_us_per_step": 1e6 * fused_s / steps,
             "pycuda_loop_env_steps_per_s": num_envs * steps / pycuda_s,
             "fused_env_steps_per_s": num_envs * steps / fused_s,
             "fused_over_pycuda": pycuda_s / fused_s,
             "final_state_identical": bool(same)}
        results.append(r)
        print(f"{name:14s} {num_envs:6d} envs: PyCUDA loop {r['pycuda_loop_us_per_step']:7.1f} "
              f"us/step, jax loop {r['jax_loop_us_per_step']:7.1f}, fused "
              f"{r['fused_us_per_step']:6.1f} -> fused/PyCUDA {r['fused_over_pycuda']:.1f}x; "
              f"same final state: {same}", flush=True)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--pycuda", action="store_true",
                    help="part 2 only: PyCUDA launch loop vs fused, contract envs")
    ap.add_argument("--out", default="experiments/results/ablation_launch.json")
    args = ap.parse_args()
    results = pycuda_ablation(args.steps) if args.pycuda else []
    for config, num_envs in ([] if args.pycuda else CASES):
        env = jaxwarp.make("tag_continuous", backend=args.backend, config=config)
        shape = (num_envs, env.num_agents)

        def one_step(state, key):
            k1, k2 = jax.random.split(key)
            actions = env.action_space.sample(k1, shape)
            obs, state, reward, done, _ = env.step(k2, state, actions)
            return state, obs

        step = jax.jit(one_step, donate_argnums=0)
        def fused_body(s, k):  # keep one number per step, not [steps, envs, agents, obs]
            s, obs = one_step(s, k)
            return s, obs[0, 0, 0]

        fused = jax.jit(lambda s, k: jax.lax.scan(fused_body, s, jax.random.split(k, args.steps)),
                        donate_argnums=0)
        _, state = jax.jit(env.reset, static_argnums=1)(jax.random.PRNGKey(0), num_envs)
        keys = jax.random.split(jax.random.PRNGKey(1), args.steps)

        state, obs = step(state, keys[0])  # warm-up / compile
        jax.block_until_ready(obs)
        t = time.perf_counter()
        for k in keys:
            state, obs = step(state, k)
            jax.block_until_ready(obs)  # the per-step sync
        per_step = time.perf_counter() - t

        state, obs = fused(state, jax.random.PRNGKey(2))  # warm-up / compile
        jax.block_until_ready(obs)
        t = time.perf_counter()
        state, obs = fused(state, jax.random.PRNGKey(3))
        jax.block_until_ready(obs)
        fused_s = time.perf_counter() - t

        r = {"config": config, "num_envs": num_envs, "backend": env.backend,
             "steps": args.steps,
             "python_loop_env_steps_per_s": num_envs * args.steps / per_step,
             "fused_env_steps_per_s": num_envs * args.steps / fused_s,
             "python_loop_us_per_step": 1e6 * per_step / args.steps,
             "fused_us_per_step": 1e6 * fused_s / args.steps}
        r["fused_over_loop"] = r["fused_env_steps_per_s"] / r["python_loop_env_steps_per_s"]
        results.append(r)
        print(f"{config:18s} {num_envs:5d} envs: python loop + sync "
              f"{r['python_loop_us_per_step']:8.1f} us/step, fused "
              f"{r['fused_us_per_step']:8.1f} us/step -> {r['fused_over_loop']:.1f}x", flush=True)
    meta = {"device": jax.devices()[0].device_kind, "jax": jax.__version__,
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    meta.update(run_meta())  # commit, command, device
    write_result(args.out, {"meta": meta, "results": results})


if __name__ == "__main__":
    main()
