"""Env-only throughput of envs built through the authoring contract: the
generated kernel vs the pure-JAX reference (and the upstream implementation
where importable), side by side in one process. Each is one jitted lax.scan
of T steps with the benchmark protocol's actions (a hash of the previous
step's observations), auto-reset on, state and observations carried and
donated, compile excluded. The timed calls alternate between the
implementations (ROUNDS rounds of one call each, in rotating order), so a
change of clock or of the machine's load touches all of them alike; each
reports its median call, and the ratio is the median of the per-round
ratios.

    python experiments/bench_contract_envs.py --out experiments/results/bench_contract_envs_h100.json
    python experiments/bench_contract_envs.py --small
    # kernel variants side by side (experiments/patches/apply.py: variant):
    python experiments/bench_contract_envs.py --only cartpole --variant= --variant=-maxrregcount=32
    # WarpDrive's Tag, the kernel alone (actions hashed from the step index), variants only:
    python experiments/bench_contract_envs.py --tag --tag-configs warpdrive_default --hashed \
        --no-jax --variant= --variant=obs_parts_only.patch
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

import jaxwarp
from patches.apply import variant  # experiments/patches
from jaxwarp.benchmark import protocol_actions, run_meta, write_result
from jaxwarp.train.trainer import import_env_module
from jaxwarp.units import device_name, rate_text

ROOT = Path(__file__).resolve().parent.parent
GPU_CASES = [("cartpole", {}, 4096, 500), ("cartpole", {}, 65536, 500),
             ("cartpole", {}, 1048576, 100), ("acrobot", {}, 65536, 200),
             ("pendulum", {}, 65536, 200), ("mountain_car", {}, 65536, 200),
             ("tag_gridworld", {}, 2000, 200), ("tag_gridworld", {}, 20000, 200),
             ("mpe_simple_spread", {}, 2000, 200), ("mpe_simple_spread", {}, 20000, 200),
             ("mpe_simple_tag", {}, 2000, 200), ("mpe_simple_tag", {}, 20000, 200),
             ("goal_reach", {"num_agents": 3}, 65536, 200)]
# WarpDrive's Tag (--tag): the kernel against its pure-JAX twin at 2000 envs
# (--no-jax for `large`, whose twin is about 100x slower), and 10,000 agents
# per env (`large` scaled at its density; the twin cannot allocate it).
TAG_CASES = {
    "warpdrive_default": ("tag_continuous", {"config": "warpdrive_default"}, 2000, 200),
    "large": ("tag_continuous", {"config": "large"}, 2000, 40),
    "agents_10000": ("tag_continuous", {"config": "large", "num_taggers": 500,
                                        "num_runners": 9500, "grid_length": 316.0}, 200, 20),
}
SMALL_CASES = [("cartpole", {}, 256, 200), ("mpe_simple_spread", {}, 256, 50),
               ("goal_reach", {"num_agents": 3}, 256, 100)]
# Upstream implementations of the same envs, timed the same way where importable.
UPSTREAM = {"cartpole": "gymnax", "mpe_simple_spread": "jaxmarl", "mpe_simple_tag": "jaxmarl"}


ROUNDS = 11


def compile_scan(run, carry):
    """Compiles run(carry, key) (carry donated) and warms it up:
    (callable(carry, i) -> carry after one timed call, seconds, carry)."""
    f = jax.jit(run, donate_argnums=0)
    t = time.perf_counter()
    compiled = f.lower(carry, jax.random.PRNGKey(1)).compile()
    compile_s = time.perf_counter() - t
    carry, out = compiled(carry, jax.random.PRNGKey(1))
    jax.block_until_ready(out)

    def timed(carry, i: int):
        t = time.perf_counter()
        carry, out = compiled(carry, jax.random.PRNGKey(2 + i))
        jax.block_until_ready(out)
        return carry, time.perf_counter() - t
    return timed, compile_s, carry


def time_rounds(entries: list[dict], rounds: int = ROUNDS) -> None:
    """Times the entries' scans in alternation: `rounds` rounds of one call
    each, each round starting one entry later than the last (so that none
    always runs first). Adds "times_s", "env_steps_per_s" (from the median
    call) and, where the entry has "num_agents", "agent_steps_per_s" to each."""
    for e in entries:
        e["times_s"] = []
    for i in range(rounds):
        for j in range(len(entries)):
            e = entries[(i + j) % len(entries)]
            e["carry"], sec = e["timed"](e["carry"], i)
            e["times_s"].append(sec)
    for e in entries:
        e["env_steps_per_s"] = e["num_envs"] * e["steps"] / statistics.median(e["times_s"])
        if e.get("num_agents"):
            e["agent_steps_per_s"] = e["env_steps_per_s"] * e["num_agents"]
        del e["carry"], e["timed"]


def ratio(a: dict, b: dict) -> float:
    """Throughput of a over b: the median of the per-round ratios."""
    return statistics.median(tb / ta for ta, tb in zip(a["times_s"], b["times_s"]))


def bench_upstream(name: str, num_envs: int, steps: int) -> dict | None:
    """gymnax CartPole-v1 / JaxMARL MPE under vmap, random actions, obs carried."""
    try:
        if name == "cartpole":
            import gymnax

            env, params = gymnax.make("CartPole-v1")
            reset = lambda k: env.reset(k, params)  # noqa: E731
            n_act = 2

            def step(k, s, a):  # gymnax 1.x: obs, state, reward, terminated, truncated, info
                obs, s, r, term, trunc, _ = env.step(k, s, a, params)
                return obs, s, r, term | trunc
        else:
            from jaxmarl.environments.mpe.simple_spread import SimpleSpreadMPE
            from jaxmarl.environments.mpe.simple_tag import SimpleTagMPE

            env = SimpleSpreadMPE() if name == "mpe_simple_spread" else SimpleTagMPE()
            reset = env.reset
            n_act = 5

            def step(k, s, a):
                acts = {agent: a[i] for i, agent in enumerate(env.agents)}
                obs, s, r, d, _ = env.step(k, s, acts)
                return obs, s, sum(r.values()), d["__all__"]
    except Exception as e:  # noqa: BLE001 - not installed here
        print(f"  (upstream {name}: not importable: {e!r})")
        return None
    agents = 1 if name == "cartpole" else len(env.agents)
    obs, state = jax.jit(jax.vmap(reset))(jax.random.split(jax.random.PRNGKey(0), num_envs))

    def row_sums(obs):
        """f32[envs, agents, 1]: each agent's observation summed (gymnax: one
        array; JaxMARL: a dict of per-agent arrays of different widths)."""
        if name == "cartpole":
            return obs.sum(-1)[:, None, None]
        return jnp.stack([obs[a].sum(-1) for a in env.agents], axis=1)[..., None]

    def run(carry, key):
        def body(c, xs):
            s, obs = c
            k, t = xs
            a = protocol_actions(t, row_sums(obs), [n_act])[..., 0]  # i32[envs, agents]
            a = a[:, 0] if name == "cartpole" else a.T
            obs, s, r, d = jax.vmap(step, in_axes=(0, 0, 1 if name != "cartpole" else 0))(
                jax.random.split(k, num_envs), s, a)
            return (s, obs), r.mean() + d.mean()
        return jax.lax.scan(body, carry, (jax.random.split(key, steps),
                                          jnp.arange(steps, dtype=jnp.int32)))

    timed, compile_s, carry = compile_scan(run, (state, obs))
    return {"env": name, "backend": "gymnax" if name == "cartpole" else "jaxmarl",
            "num_envs": num_envs, "num_agents": agents, "steps": steps, "compile_s": compile_s,
            "timed": timed, "carry": carry}


def scan_of(env, num_envs: int, steps: int, hashed: bool = False):
    """run((state, obs), key): `steps` env steps, each step's actions a hash of
    the previous step's observations (jaxwarp.benchmark), one lax.scan.
    hashed: actions from the step index alone (figures of the kernel alone)."""
    nvec = env.action_space.nvec

    def run(carry, key):
        def body(c, xs):
            s, obs = c
            k, t = xs
            a = protocol_actions(t, None if hashed else obs, nvec, (num_envs, env.num_agents))
            obs, s, r, d, _ = env.step(k, s, a)
            return (s, obs), r.mean() + d.mean()
        return jax.lax.scan(body, carry, (jax.random.split(key, steps),
                                          jnp.arange(steps, dtype=jnp.int32)))
    return run


def prepare(name: str, params: dict, backend: str, num_envs: int, steps: int,
            flags: str | None = None, hashed: bool = False) -> dict:
    """The env's scan, compiled and warmed up (time_rounds times it). flags:
    the kernel's build variant (experiments/patches/apply.py: a patch,
    nvcc flags or MODULE.NAME=VALUE; None or "": the tree as it is)."""
    with variant(flags):  # the env is built (or found in the cache) when made
        env = jaxwarp.make(name, backend=backend, **params)
    nvec = env.action_space.nvec
    run = scan_of(env, num_envs, steps, hashed)
    obs, state = jax.jit(env.reset, static_argnums=1)(jax.random.PRNGKey(0), num_envs)
    timed, compile_s, carry = compile_scan(run, (state, obs))
    label = env.backend if flags is None else f"{env.backend}[{flags}]"
    return {"env": name, "params": params, "backend": label, "hashed": hashed,
            "num_envs": num_envs,
            "num_agents": env.num_agents, "nvec": list(map(int, nvec)), "steps": steps,
            "compile_s": compile_s, "timed": timed, "carry": carry}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--only", nargs="+", default=None, help="only these envs")
    ap.add_argument("--out", default="experiments/results/bench_contract_envs.json")
    ap.add_argument("--variant", action="append", metavar="FLAGS", dest="variants",
                    help="a kernel build side by side with the others (repeat; --variant= "
                         "for the shipped build): NAME.patch from experiments/patches/, "
                         "nvcc flags (-...), or MODULE.NAME=VALUE, a constant of "
                         "jaxwarp.envs.MODULE set while the env is made")
    ap.add_argument("--tag", action="store_true",
                    help="WarpDrive's Tag at its two sizes instead of the table's envs")
    ap.add_argument("--tag-configs", nargs="+", default=["warpdrive_default", "large"],
                    choices=list(TAG_CASES), help="with --tag: these cases")
    ap.add_argument("--hashed", action="store_true",
                    help="actions from the step index alone: the kernel alone (label it so)")
    ap.add_argument("--no-jax", action="store_true",
                    help="kernels only, no pure-JAX twin or upstream env")
    args = ap.parse_args()
    args.variants = args.variants or [None]
    for v in args.variants:
        if v and not v.startswith("-") and not v.endswith(".patch") and "=" not in v:
            ap.error(f"--variant: expected NAME.patch, nvcc flags (-...) or MODULE.NAME=VALUE; "
                     f"got {v!r}")
    import_env_module(str(ROOT / "examples" / "goal_reach" / "goal_reach.py"))
    gpu = jaxwarp.gpu_available()
    kernel = "cuda" if gpu else "cpu"
    cases = SMALL_CASES if args.small or not gpu else GPU_CASES
    if args.tag:
        cases = [TAG_CASES[c] for c in args.tag_configs]
    if args.only:
        cases = [c for c in cases if c[0] in args.only]
    device = device_name(jax.devices()[:1])
    results = []
    for name, params, n, steps in cases:
        if name not in jaxwarp.registered_envs():
            print(f"{name}: not registered here, skipped")
            continue
        kernels = [prepare(name, params, kernel, n, steps, flags, args.hashed)
                   for flags in args.variants]
        entries = list(kernels)
        if not args.no_jax:
            entries.append(prepare(name, params, "jax", n, steps, hashed=args.hashed))
            if name in UPSTREAM and not params and not args.hashed:
                u = bench_upstream(name, n, steps)
                if u is not None:
                    entries.append(u)
        time_rounds(entries)
        label = name + "".join(f"[{k}={v}]" if k != "config" else f"[{v}]"
                               for k, v in params.items())
        for e in entries:
            print(f"{label:10s} {n:8d} envs {e['backend']:4s}: "
                  f"{rate_text(e['env_steps_per_s'], e.get('num_agents'), device)} "
                  f"(compile {e['compile_s']:.1f} s){' hashed' if args.hashed else ''}",
                  flush=True)
        for k in kernels if not args.no_jax else []:
            jax_entry = entries[len(kernels)]
            k["over_jax"] = ratio(k, jax_entry)
            line = f"{'':28s} {k['backend']}/jax = {k['over_jax']:.2f}x"
            for u in entries[len(kernels) + 1:]:
                over = k[f"over_{u['backend']}"] = ratio(k, u)
                line += f", /{u['backend']} = {over:.2f}x"
            print(line, flush=True)
        for k in kernels[1:]:  # variants: the first one's throughput over each other's
            over = kernels[0][f"over_{k['backend']}"] = ratio(kernels[0], k)
            print(f"{'':28s} {kernels[0]['backend']}/{k['backend']} = {over:.2f}x", flush=True)
        results.extend(entries)
    meta = {"rounds": ROUNDS, "device": jax.devices()[0].device_kind, "jax": jax.__version__,
            "argv": sys.argv[1:],
            "python": sys.version.split()[0], "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    meta.update(run_meta())  # commit, command, device
    write_result(args.out, {"meta": meta, "results": results})


if __name__ == "__main__":
    main()
