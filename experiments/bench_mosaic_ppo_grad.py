"""A PPO minibatch's loss and gradient on the Mosaic GPU kernels, against XLA.

What the learner's minibatch step computes before Optax (``jax.value_and_grad``
of ``losses.policy_loss``, PPO, advantages normalised per minibatch) for the
64-64 tanh two-tower ``mlp`` of the CartPole and MPE configs, every seed at
once, at the time-to-return benchmark's GPU sizes. The kernels are the
product's (``jaxwarp.train.ppo_mosaic``: one persistent kernel per tower,
forward, loss gradient, chain and weight gradients on chip; its docstring says
how); this bench was where they were first written and measured (commit
77862cf), and it now times the shipped code.

Sides (each checked against XLA at ``precision=highest``; all return
((loss, metrics), grads) with grads shaped as the model's params):

* ``xla``: the float32 model, what the trainer runs for it (XLA's default TF32
  dots on the GPU), ``jax.vmap`` over seeds of ``jax.value_and_grad``,
  compiled with the options a ten-seed time-to-return run gets
  (``compiler_options(False, seeds)``);
* ``xla_bf16``: the same with bfloat16 matmuls, what the trainer ran for a
  bf16 model before the kernels;
* ``mgpu``: ``ppo_mosaic.grads``, the kernels and the XLA fusions around them
  (the operands' packing, the partials' sums);
* ``mgpu_kernels``: the two tower kernels alone on operands packed outside the
  timed program (timing only).

    python experiments/bench_mosaic_ppo_grad.py                   # CartPole and MPE, GPU size
    python experiments/bench_mosaic_ppo_grad.py --cases cartpole

Without a GPU the XLA sides are checked on the CPU and the kernel sides are
lowered for CUDA (``jax.export``) where a jax-cuda plugin is installed, else
reported ``skipped: no GPU``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:  # the benches beside this file (they put the checkout on the path)
    sys.path.insert(0, HERE)

import bench_mosaic_layer as layer_bench
from bench_mosaic_layer import Skip

from jaxwarp.benchmark import write_result
from jaxwarp.models.mlp import MLPActorCritic
from jaxwarp.train import losses, ppo_mosaic
from jaxwarp.train.compile import compiler_options

W, AUX = ppo_mosaic.W, ppo_mosaic.AUX
HYPER = {"clip_eps": 0.2, "vf_coef": 0.5, "ent_coef": 0.01}
# case -> observation features, actions, rows per minibatch, seeds (GPU size of
# bench_time_to_return: CartPole 2,048 envs x 32 steps / 4 minibatches; MPE 1,024 envs x
# 32 steps x 3 agents / 4 minibatches; ten seeds, as the time-to-return runs).
CASES = {"cartpole": (4, 2, 16_384, 10), "mpe": (18, 5, 24_576, 10)}
SIDES = ("xla", "xla_bf16", "mgpu", "mgpu_kernels")


def kernels_only(weights: tuple, rows: tuple, *, actions: int, grid: Any) -> tuple:
    """The two tower kernels alone on operands packed outside the timed
    program (`packed`), their partials unsummed: the ``mgpu_kernels`` side."""
    x, aux_a, aux_c = rows
    run = functools.partial(ppo_mosaic.tower_grad, actions=actions, act="tanh", grid=grid)
    return (run(x, aux_a, weights[0], kind="actor"), run(x, aux_c, weights[1], kind="critic"))


def packed(params: dict, mb: losses.Batch) -> tuple[tuple, tuple]:
    """((x, the actor's aux, the critic's aux), (the actor's weights, the
    critic's)) as `ppo_mosaic.grads` packs them."""
    p = params["params"]
    m, n = mb.advantage.shape
    hyper = tuple(jnp.full((m,), HYPER[k]) for k in ("clip_eps", "vf_coef", "ent_coef"))
    aux_a, aux_c = ppo_mosaic._aux(mb, hyper, n, True)
    x = ppo_mosaic._padded(mb.obs, (m, n, W), jnp.bfloat16).reshape(m * n, W)
    return ((x, aux_a.reshape(-1, AUX), aux_c.reshape(-1, AUX)),
            (ppo_mosaic._tower_weights(p, ppo_mosaic.ACTOR, jnp.bfloat16),
             ppo_mosaic._tower_weights(p, ppo_mosaic.CRITIC, jnp.bfloat16)))


def mgpu_side(params: dict, mb: losses.Batch, *, actions: int):
    """((loss, metrics), grads) for every seed by the shipped kernels."""
    hyper = tuple(jnp.full(mb.advantage.shape[:1], HYPER[k])
                  for k in ("clip_eps", "vf_coef", "ent_coef"))
    return ppo_mosaic.grads(params, mb, hyper, normalize=True, actions=actions, act="tanh")


def _loss(model: MLPActorCritic, p: dict, mb: losses.Batch):
    logits, value = model.apply(p, mb.obs)
    lp, ent = losses.head_stats(logits, mb.actions, model.action_dims)
    return losses.policy_loss(lp, ent, value, mb, algorithm="ppo", normalize_advantages=True,
                              **HYPER)


def xla_side(params: dict, mb: losses.Batch, *, model: MLPActorCritic):
    """The trainer's minibatch step before Optax, every seed: vmap of
    value_and_grad of policy_loss -> ((loss [seeds], metrics), grads)."""
    grad = jax.value_and_grad(functools.partial(_loss, model), has_aux=True)
    return jax.vmap(grad)(params, mb)


# --- the case, the check, the timing ---------------------------------------------------------


def make_case(obs_dim: int, actions: int, rows: int, seeds: int, inner: int, key: int = 0
              ) -> tuple[MLPActorCritic, dict, list[losses.Batch]]:
    """The model, params [seeds, ...] (orthogonal init, then perturbed so the
    heads are not near-uniform) and `inner` distinct minibatches [seeds, rows,
    ...]: behaviour log-probs and values from the current params plus noise,
    so that some ratios and values fall outside the clip range."""
    model = MLPActorCritic(action_dims=(actions,), hidden_sizes=(W, W), activation="tanh")
    keys = jax.random.split(jax.random.PRNGKey(key), seeds + 1)
    params = jax.vmap(lambda k: model.init(k, jnp.zeros((1, obs_dim))))(keys[:seeds])
    params = jax.tree.map(
        lambda a, k: a + 0.1 * jax.random.normal(k, a.shape),
        params, jax.tree.unflatten(jax.tree.structure(params),
                                   list(jax.random.split(keys[-1], len(jax.tree.leaves(params))))))
    batches = []
    for i in range(inner):
        k = jax.random.split(jax.random.PRNGKey(1000 + i), 6)
        obs = jax.random.normal(k[0], (seeds, rows, obs_dim))
        act = jax.random.randint(k[1], (seeds, rows, 1), 0, actions)
        logits, value = jax.vmap(model.apply)(params, obs)
        lp, _ = losses.head_stats(logits, act, (actions,))
        batches.append(losses.Batch(
            obs=obs, actions=act, log_prob=lp + 0.15 * jax.random.normal(k[2], lp.shape),
            value=value + 0.3 * jax.random.normal(k[3], value.shape),
            advantage=jax.random.normal(k[4], value.shape) + 0.3,
            target=value + jax.random.normal(k[5], value.shape)))
    return model, params, batches


def errors(got: Any, want: Any) -> dict[str, float]:
    """Per leaf of ((loss, metrics), grads): the largest |error| over the
    leaf's largest |value| (over every seed)."""
    out = {}
    flat_got = jax.tree_util.tree_flatten_with_path(got)[0]
    for (path, g), w in zip(flat_got, jax.tree.leaves(want)):
        scale = float(jnp.max(jnp.abs(w)))
        err = float(jnp.max(jnp.abs(g.astype(jnp.float32) - w)))
        out[jax.tree_util.keystr(path)] = err / (scale or 1.0)
    return out


def side_fn(side: str, model: MLPActorCritic, actions: int):
    if side == "xla":
        return functools.partial(xla_side, model=model)
    if side == "xla_bf16":
        return functools.partial(xla_side, model=model.clone(dtype=jnp.bfloat16))
    return functools.partial(mgpu_side, actions=actions)


def run_side(side: str, case: tuple, ref: Any, args: argparse.Namespace, gpu: bool,
             sms: int) -> dict[str, Any]:
    model, params, batches = case
    mb = batches[0]
    seeds, rows, _ = mb.obs.shape
    out: dict[str, Any] = {}
    if side == "mgpu_kernels":
        grid = ppo_mosaic.grid_for(seeds, rows, sms)
        fn = functools.partial(kernels_only, actions=model.action_dims[0], grid=grid)
        ops = [packed(params, m) for m in batches]
        if not gpu:
            layer_bench.lowered_only(fn, (ops[0][1], ops[0][0]))
        step = jax.jit(fn)
        program = jax.jit(lambda ws, rs: tuple(step(ws, r) for r in rs))
        operands = (ops[0][1], [r for r, _ in ops])
        compiled = program.lower(*operands).compile()
        out["check"] = "timing only"
        out.update(layer_bench.timed(compiled, operands, len(batches), args, gpu))
        return out
    fn = side_fn(side, model, model.action_dims[0])
    if side == "mgpu":
        out["grid"] = dataclasses.asdict(ppo_mosaic.grid_for(seeds, rows, sms))
        if not gpu:
            layer_bench.lowered_only(fn, (params, mb))
    options = compiler_options(False, members=seeds) if gpu else None
    step = jax.jit(fn)
    program = jax.jit(lambda p, mbs: tuple(step(p, m) for m in mbs), compiler_options=options)
    t = time.perf_counter()
    compiled = program.lower(params, batches).compile()
    out["compile_s"] = time.perf_counter() - t
    first = compiled(params, batches)[0]
    out["errors"] = errors(first, ref)
    out["max_rel_err"] = max(out["errors"].values())
    out.update(layer_bench.timed(compiled, (params, batches), len(batches), args, gpu))
    return out


def main() -> int:
    ap = layer_bench.run_parser(__doc__, "CartPole only", "minibatches", 300.0)
    ap.add_argument("--cases", default=",".join(CASES), help="of " + ", ".join(CASES))
    ap.add_argument("--sides", default=",".join(SIDES), help="a subset of " + ", ".join(SIDES))
    ap.add_argument("--seeds", type=int, default=None, help="seeds (default: the case's)")
    ap.add_argument("--inner", type=int, default=8, help="minibatches a timed program")
    ap.add_argument("--out", default="experiments/results/bench_mosaic_ppo_grad_h200.json")
    args = ap.parse_args()
    start = time.perf_counter()
    sides = [s for s in args.sides.split(",") if s in SIDES]
    gpu, sms, meta = layer_bench.start_run(args, sides)
    results: list[dict[str, Any]] = []
    failures: list[str] = []
    data = {"meta": meta, "config": {"cases": {}, "sides": sides, "hyper": HYPER,
                                     "inner": args.inner}, "results": results,
            "failures": failures}
    for name in (["cartpole"] if args.quick else args.cases.split(",")):
        obs_dim, actions, rows, seeds = CASES[name]
        rows, seeds = int(args.rows or rows), args.seeds or seeds
        data["config"]["cases"][name] = {"obs_dim": obs_dim, "actions": actions, "rows": rows,
                                         "seeds": seeds}
        case = make_case(obs_dim, actions, rows, seeds, args.inner if gpu else 1)
        with jax.default_matmul_precision("highest"):
            ref = jax.jit(functools.partial(xla_side, model=case[0]))(case[1], case[2][0])
        entry: dict[str, Any] = {"case": name, "sides": {}}
        results.append(entry)
        print(f"{name}: {seeds} seeds x {rows} rows, {actions} actions, obs {obs_dim}",
              flush=True)
        for side in sides:
            t = time.perf_counter()
            try:
                r = run_side(side, case, ref, args, gpu, sms)
            except Skip as e:
                r = {"status": str(e)}
            except Exception as e:  # noqa: BLE001  (a side that fails is a finding)
                r = {"status": f"error: {layer_bench.first_lines(e)}"}
                failures.append(f"{name} {side}: {r['status']}")
                if args.traceback:
                    import traceback
                    traceback.print_exc()
            r["side_s"] = time.perf_counter() - t
            xla_us = entry["sides"].get("xla", {}).get("us")
            if xla_us and "us" in r:
                r["speed_vs_xla"] = xla_us / r["us"]
            entry["sides"][side] = r
            shown = {k: r[k] for k in ("us", "us_from", "speed_vs_xla", "max_rel_err", "status")
                     if k in r}
            print(f"  {side:9s} {shown}", flush=True)
        data["elapsed_s"] = time.perf_counter() - start
        write_result(args.out, data)
    return layer_bench.finish(args.out, data, start)


if __name__ == "__main__":
    sys.exit(main())
