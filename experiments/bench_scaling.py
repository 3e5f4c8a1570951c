"""Scaling over the GPUs of one host: envs alone and whole training runs,
weak scaling (a fixed number of envs per GPU), efficiency = throughput on D
GPUs / (D x throughput on one).

``--part env``: for each case, the protocol rollout of bench_contract_envs.py
(one jitted lax.scan, actions a hash of the previous observations, compile
apart, timed calls alternating between variants in rounds) on one GPU and on
D GPUs as

* ``jit``: plain ``jax.jit`` over state split along the env axis (the FFI
  calls' partitioning rule), the scan's per-step output a mean over all envs
  (as bench_contract_envs.py writes it);
* ``jit_local``: the same, each env's reward and done summed into a carried
  per-env array instead (nothing crosses devices inside the loop);
* ``sharded_env``: `jaxwarp.sharding.ShardedEnv`, per-step means as ``jit``;
* ``shard_map``: each GPU runs the one-GPU program over its own envs (a hand
  ``jax.shard_map``; random streams keyed by the local env index, so not the
  one-GPU numbers: a speed reference only).

``--part train``: `Trainer.run` compiled with `jaxwarp.train.jit` (the CLI's
compile), shipped config at its envs per GPU on 1 and D GPUs (``devices=``;
``--counts 1,2,4`` for more), deterministic and not, timed calls alternating
between them. ``--strong``: strong scaling instead, the config's num_envs
(or ``--envs-per-device`` on one GPU) split over the GPUs. ``--seed-axis``: the
program as the CLI compiles it, `jax.vmap` over one seed (state [1, ...],
envs split along axis 1).

    python experiments/bench_scaling.py --part env --out experiments/results/scaling_env_h100x2.json
    python experiments/bench_scaling.py --part train --out experiments/results/scaling_train_h100x2.json
    python experiments/bench_scaling.py --part train --devices 1 --configs tag_2000_envs  # 1 GPU
    python experiments/bench_scaling.py --part train --counts 1,2,4 --strong
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxwarp
from bench_contract_envs import ROUNDS, compile_scan, scan_of, time_rounds
from jaxwarp import sharding
from jaxwarp.benchmark import protocol_actions, run_meta
from jaxwarp.units import device_name, rate_text

# (env, params, envs per GPU, steps per call)
ENV_CASES = [("mpe_simple_spread", {}, 20000, 200),
             ("tag_continuous", {"config": "warpdrive_default"}, 2000, 200),
             ("cartpole", {}, 1048576, 100)]
SMALL_ENV_CASES = [("mpe_simple_spread", {}, 64, 20), ("cartpole", {}, 256, 20)]
# (shipped config, overrides, updates per timed call): envs per GPU as shipped.
TRAIN_CASES = {"tag_2000_envs": ([], 3), "tag_warpdrive_default": ([], 5),
               "tag_100_agents": ([], 3), "tag_1000_agents": ([], 2),
               "tag_chase": ([], 3),
               "tag_small_cpu": (["num_envs=16", "num_steps=16"], 2)}


def local_scan(env, num_envs: int, steps: int):
    """scan_of's rollout with per-env sums carried instead of per-step means
    over all envs: the loop reduces nothing across envs (devices)."""
    nvec = env.action_space.nvec

    def run(carry, key):
        def body(c, xs):
            s, obs, acc = c
            k, t = xs
            a = protocol_actions(t, obs, nvec, (num_envs, env.num_agents))
            obs, s, r, d, _ = env.step(k, s, a)
            return (s, obs, acc + r.sum(-1) + d.astype(jnp.float32)), None
        (s, obs, acc), _ = jax.lax.scan(body, carry, (jax.random.split(key, steps),
                                                      jnp.arange(steps, dtype=jnp.int32)))
        return (s, obs, acc), acc.sum()
    return run


def _entry(label, env, run, carry, num_envs, steps, devices):
    timed, compile_s, carry = compile_scan(run, carry)
    return {"variant": label, "env": env.name, "backend": env.backend, "devices": devices,
            "num_envs": num_envs, "envs_per_device": num_envs // devices, "steps": steps,
            "num_agents": env.num_agents,  # time_rounds adds agent_steps_per_s
            "compile_s": compile_s, "timed": timed, "carry": carry}


def env_case(name: str, params: dict, per_gpu: int, steps: int, devices: int,
             backend: str) -> list[dict]:
    env = jaxwarp.make(name, backend=backend, **params)
    gpus = jax.devices()[:devices]
    entries = []
    with jax.default_device(gpus[0]):  # one device
        obs, state = jax.jit(env.reset, static_argnums=1)(jax.random.PRNGKey(0), per_gpu)
        entries.append(_entry("one", env, scan_of(env, per_gpu, steps), (state, obs),
                              per_gpu, steps, 1))
        obs, state = jax.jit(env.reset, static_argnums=1)(jax.random.PRNGKey(0), per_gpu)
        acc = jnp.zeros((per_gpu,), jnp.float32)
        entries.append(_entry("one_local", env, local_scan(env, per_gpu, steps),
                              (state, obs, acc), per_gpu, steps, 1))
    if devices > 1:
        n = per_gpu * devices
        mesh = Mesh(np.array(gpus), ("envs",))
        split = NamedSharding(mesh, P("envs"))
        reset = jax.jit(env.reset, static_argnums=1, out_shardings=split)
        obs, state = reset(jax.random.PRNGKey(0), n)
        entries.append(_entry("jit", env, scan_of(env, n, steps), (state, obs), n, steps,
                              devices))
        obs, state = reset(jax.random.PRNGKey(0), n)
        acc = jax.device_put(jnp.zeros((n,), jnp.float32), split)
        entries.append(_entry("jit_local", env, local_scan(env, n, steps), (state, obs, acc),
                              n, steps, devices))
        senv = sharding.ShardedEnv(env, mesh)
        obs, state = senv.reset(jax.random.PRNGKey(0), n)
        entries.append(_entry("sharded_env", senv, scan_of(senv, n, steps), (state, obs), n,
                              steps, devices))
        # Hand shard_map: every device runs the one-device scan on its own envs.
        one = scan_of(env, per_gpu, steps)

        def per_device(carry, key):
            carry, ys = one(carry, key)
            return carry, jax.lax.pmean(ys, "envs")
        run = jax.shard_map(per_device, mesh=mesh, in_specs=(P("envs"), P()),
                            out_specs=(P("envs"), P()), check_vma=False)
        obs, state = reset(jax.random.PRNGKey(0), n)
        entries.append(_entry("shard_map", env, run, (state, obs), n, steps, devices))
    return entries


def run_env(args, save) -> list[dict]:
    gpu = jaxwarp.gpu_available()
    backend = "cuda" if gpu else "cpu"
    cases = ENV_CASES if gpu and not args.small else SMALL_ENV_CASES
    if args.only:
        cases = [c for c in cases if c[0] in args.only]
    results = []
    for name, params, per_gpu, steps in cases:
        entries = env_case(name, params, per_gpu, steps, args.devices, backend)
        time_rounds(entries, args.rounds)
        base = {e["variant"]: e["env_steps_per_s"] for e in entries if e["devices"] == 1}
        label = name + "".join(f"[{v}]" for v in params.values())
        for e in entries:
            ref = base["one_local" if e["variant"] in ("one_local", "jit_local") else "one"]
            e["efficiency"] = e["env_steps_per_s"] / (e["devices"] * ref)
            e["params"] = params
            e["median_s"] = statistics.median(e["times_s"])
            print(f"{label:32s} {e['envs_per_device']:8d}/dev x{e['devices']} "
                  f"{e['variant']:12s} {rate_text(e['env_steps_per_s'], e['num_agents'])} "
                  f"on {device_name(jax.devices()[:e['devices']])} "
                  f"efficiency {e['efficiency']:.3f} (compile {e['compile_s']:.1f} s)",
                  flush=True)
        results.extend(entries)
        save(results)  # after every case: a cut-off run keeps what it measured
    return results


def train_entry(config_name: str, overrides: list[str], updates: int, devices: int,
                deterministic: bool, per_device_envs: int | None, strong: bool = False,
                seed_axis: bool = False) -> dict:
    from jaxwarp.train import build_trainer, jit, load_config

    base = load_config(config_name, overrides)
    n = (per_device_envs or base.num_envs) * (1 if strong else devices)
    config = load_config(config_name, [*overrides, f"num_envs={n}", f"devices={devices}",
                                       f"deterministic={str(deterministic).lower()}"])
    trainer = build_trainer(config)
    if seed_axis:  # as the CLI runs it: vmapped over a leading seed axis of one
        keys = jax.random.split(jax.random.PRNGKey(0), 1)
        state = jax.jit(jax.vmap(trainer.init))(keys)
        if trainer.mesh is not None:
            state = jax.device_put(state, trainer.state_shardings(state, seed_axis=True))
        run = jit(jax.vmap(lambda s: trainer.run(s, updates)), deterministic, donate_argnums=0)
    else:
        state = jax.jit(trainer.init)(jax.random.PRNGKey(0))
        run = jit(lambda s: trainer.run(s, updates), deterministic, donate_argnums=0)
    t = time.perf_counter()
    compiled = run.lower(state).compile()
    compile_s = time.perf_counter() - t
    state, m = compiled(state)
    jax.block_until_ready((state, m))

    def timed(state, i):
        t = time.perf_counter()
        state, m = compiled(state)
        jax.block_until_ready((state, m))
        return state, time.perf_counter() - t

    batch = trainer.derived.batch_env_steps
    return {"variant": f"train d{devices} {'det' if deterministic else 'nondet'}"
                       + (" strong" if strong else "") + (" seed-axis" if seed_axis else ""),
            "scaling": "strong" if strong else "weak", "seed_axis": seed_axis,
            "config": config_name, "overrides": overrides, "devices": devices,
            "deterministic": deterministic, "num_envs": n, "envs_per_device": n // devices,
            "num_steps": config.num_steps, "algorithm": config.algorithm,
            "updates_per_call": updates, "compile_s": compile_s, "timed": timed,
            "carry": state, "batch_env_steps": batch,
            "num_agents": int(trainer.env.num_agents),  # time_rounds adds agent_steps_per_s
            # time_rounds: env-steps/s = num_envs * steps / median call
            "steps": config.num_steps * updates}


def run_train(args, save) -> list[dict]:
    gpu = jaxwarp.gpu_available()
    configs = args.configs or (["tag_2000_envs"] if gpu else ["tag_small_cpu"])
    results = []
    for name in configs:
        overrides, updates = TRAIN_CASES.get(name, ([], 3))
        if not gpu:
            overrides = [*overrides, "backend=cpu"]
        counts = sorted({1, args.devices, *args.counts})
        dets = {"true": [True], "false": [False], "both": [True, False]}[args.deterministic]
        entries = [train_entry(name, overrides, updates, d, det, args.envs_per_device,
                               args.strong, args.seed_axis)
                   for d in counts for det in dets]
        time_rounds(entries, args.rounds)
        for e in entries:
            one = next(x for x in entries
                       if x["devices"] == 1 and x["deterministic"] == e["deterministic"])
            e["efficiency"] = e["env_steps_per_s"] / (e["devices"] * one["env_steps_per_s"])
            e["median_s"] = statistics.median(e["times_s"])
            if not e["deterministic"]:
                twin = [x for x in entries if x["devices"] == e["devices"] and x["deterministic"]]
                if twin:  # the cost of determinism: nondeterministic over deterministic rate
                    e["nondet_over_det"] = e["env_steps_per_s"] / twin[0]["env_steps_per_s"]
            print(f"{name:22s} {e['envs_per_device']:6d} envs/dev x{e['devices']} "
                  f"{'det   ' if e['deterministic'] else 'nondet'} "
                  f"{rate_text(e['env_steps_per_s'], e['num_agents'])} "
                  f"on {device_name(jax.devices()[:e['devices']])} "
                  f"efficiency {e['efficiency']:.3f}"
                  + (f" nondet/det {e['nondet_over_det']:.4f}" if 'nondet_over_det' in e else "")
                  + f" (compile {e['compile_s']:.1f} s)", flush=True)
        results.extend(entries)
        save(results)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=["env", "train"], default="env")
    ap.add_argument("--devices", type=int, default=None,
                    help="GPUs to scale to (default: every device jax sees)")
    ap.add_argument("--small", action="store_true", help="CPU-sized env cases")
    ap.add_argument("--only", nargs="+", default=None, help="env part: only these envs")
    ap.add_argument("--configs", nargs="+", default=None, help="train part: shipped configs")
    ap.add_argument("--envs-per-device", type=int, default=None,
                    help="train part: envs per device (default: the config's num_envs)")
    ap.add_argument("--deterministic", choices=["true", "false", "both"], default="both",
                    help="train part: compile with XLA's deterministic ops, without, or both")
    ap.add_argument("--counts", type=lambda v: [int(x) for x in v.split(",")], default=[],
                    help="train part: device counts to time besides 1 and --devices, e.g. 1,2,4")
    ap.add_argument("--strong", action="store_true",
                    help="train part: strong scaling (the same global num_envs on every count)")
    ap.add_argument("--seed-axis", action="store_true",
                    help="train part: the CLI's program, vmapped over one seed")
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    args.devices = args.devices or jax.device_count()
    meta = {"part": args.part, "rounds": args.rounds, "devices_seen": jax.device_count(),
            "device": jax.devices()[0].device_kind, "jax": jax.__version__,
            "argv": sys.argv[1:], "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    meta.update(run_meta())  # commit, command, device
    out = Path(args.out or f"experiments/results/scaling_{args.part}.json")
    out.parent.mkdir(parents=True, exist_ok=True)

    def save(results):
        rows = [{k: v for k, v in r.items() if k not in ("timed", "carry")} for r in results]
        out.write_text(json.dumps({"meta": meta, "results": rows}, indent=2))

    (run_env if args.part == "env" else run_train)(args, save)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
