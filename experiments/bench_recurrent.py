"""The recurrent learner's cost: a GRU update against the MLP's at the same size.

MPE ``simple_spread`` at JaxMARL's IPPO-RNN settings (``ippo_rnn_mpe.yaml``: 16
envs x 128 steps, GRU 128 over a 128-unit embedding, relu, 4 epochs x 2
minibatches, clip 0.3, value coefficient 1.0, lr 5e-4 annealed) and at a GPU
size (1,024 envs x 32 steps, the same model). Each row times ``Trainer.run``
(rollout + GAE + PPO update; compile apart, warm-up, median of --repeats calls,
``block_until_ready``), compiled as the CLI compiles it (`jaxwarp.train.jit`):

* ``gru``: the shipped model; the learner runs its sequence form (only the
  cell is scanned, one matmul a step; the scan's backward written by hand:
  one matmul a step back, the recurrent weights' gradient as one matmul over
  all T x B rows after it);
* ``gru_autodiff``: the same sequence form with the scan differentiated by jax;
* ``gru_steps``: the same model without its sequence form, replayed step by
  step (the learner's path before the sequence form);
* ``mlp``: the shipped MLP with the same hidden layer, the reference cost;
* ``+cb``: the same program with XLA's command buffers over the whole loop.

    python experiments/bench_recurrent.py --out experiments/results/bench_recurrent_h100.json
    python experiments/bench_recurrent.py --small      # sizes for a CPU
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from unittest import mock
from typing import Any

import jax
import jax.numpy as jnp

import bench_train  # noqa: F401  (registers the model gru_steps)
from jaxwarp.benchmark import run_meta
from jaxwarp.models import GRUActorCritic, recurrent, register_model
from jaxwarp.models.recurrent import gru_scan
from jaxwarp.train import build_trainer, compiler_options, load_config
from jaxwarp.units import device_name, rate_text

# JaxMARL baselines/IPPO/config/ippo_rnn_mpe.yaml as jaxwarp overrides.
JAXMARL = ["update_epochs=4", "num_minibatches=2", "clip_eps=0.3", "vf_coef=1.0",
           "policies.agent.lr=0.0005", "anneal_lr=true", "policies.agent.rnn_size=128",
           "policies.agent.hidden_sizes=[128]", "policies.agent.activation=relu"]
SIZES = {"jaxmarl": ["num_envs=16", "num_steps=128"], "gpu": ["num_envs=1024", "num_steps=32"],
         "small": ["num_envs=8", "num_steps=16", "policies.agent.rnn_size=16",
                   "policies.agent.hidden_sizes=[16]"]}
COMMAND_BUFFERS = {"xla_gpu_enable_command_buffer": "FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,WHILE,"
                                                     "CONDITIONAL",
                   "xla_gpu_graph_min_graph_size": 1}


def autodiff_scan(xs: jax.Array, w_rec: jax.Array, b_hn: jax.Array, h0: jax.Array,
                  reset: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`jaxwarp.models.recurrent.gru_scan`'s forward, differentiated by jax (its
    loop a plain `lax.scan`: `scan_batch_first` is forward only)."""
    with mock.patch.object(recurrent, "scan_batch_first", recurrent.scan_with_consts):
        return gru_scan.fun(xs, w_rec, b_hn, h0, reset)


class AutodiffGRU(GRUActorCritic):
    """The shipped gru whose sequence form's scan is differentiated by jax
    (model ``gru_autodiff``) instead of `gru_scan`'s hand-written backward."""

    def sequence(self, carry, obs, reset):
        with mock.patch.object(recurrent, "gru_scan", autodiff_scan):
            return super().sequence(carry, obs, reset)


register_model("gru_autodiff", lambda nvec, p: AutodiffGRU(
    tuple(int(n) for n in nvec), tuple(p.hidden_sizes), p.rnn_size, p.activation))


def time_case(size: str, model: str, options: dict[str, Any] | None, updates: int,
              repeats: int) -> dict[str, Any]:
    """env-steps/s of `updates` updates a call for one size and model."""
    overrides = [*JAXMARL, *SIZES[size], f"policies.agent.model={model}"]
    config = load_config("mpe_simple_spread_ppo", overrides)
    trainer = build_trainer(config)
    state = jax.jit(trainer.init)(jax.random.PRNGKey(0))
    opts = {**compiler_options(config.deterministic), **(options or {})}
    run = jax.jit(lambda s: trainer.run(s, updates), donate_argnums=0, compiler_options=opts)
    t = time.perf_counter()
    compiled = run.lower(state).compile()
    compile_s = time.perf_counter() - t
    state, m = jax.block_until_ready(compiled(state))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        state, m = jax.block_until_ready(compiled(state))
        times.append(time.perf_counter() - t)
    sec = statistics.median(times) / updates
    batch = trainer.derived.batch_env_steps
    return {"size": size, "model": model, "command_buffers": bool(options),
            "overrides": overrides, "num_envs": config.num_envs, "num_steps": config.num_steps,
            "num_agents": trainer.env.num_agents, "recurrent_learner":
            dict(trainer.recurrent_learner), "rollout": trainer.rollout_path,
            "compile_s": compile_s, "ms_per_update": 1e3 * sec, "times_s": times,
            "env_steps_per_s": batch / sec, "agent_steps_per_s": batch * 3 / sec,
            "losses_finite": bool(jnp.isfinite(m["agent/loss"]).all())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="jaxmarl,gpu")
    ap.add_argument("--models", default="gru,gru_autodiff,gru_steps,mlp")
    ap.add_argument("--command-buffers", default="gru",
                    help="models also timed with command buffers ('' for none)")
    ap.add_argument("--small", action="store_true", help="CPU sizes (--sizes small)")
    ap.add_argument("--updates", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="experiments/results/bench_recurrent.json")
    args = ap.parse_args()
    sizes = ["small"] if args.small else args.sizes.split(",")
    cb = [m for m in args.command_buffers.split(",") if m] if jax.default_backend() == "gpu" \
        else []
    device, rows = device_name(jax.devices()[:1]), []
    for size in sizes:
        for model in args.models.split(","):
            for options in ([None, COMMAND_BUFFERS] if model in cb else [None]):
                r = time_case(size, model, options, args.updates, args.repeats)
                rows.append(r)
                print(f"{size:8s} {model + ('+cb' if options else ''):13s} "
                      f"{rate_text(r['env_steps_per_s'], 3, device)} "
                      f"({r['ms_per_update']:.1f} ms/update, compile {r['compile_s']:.1f} s, "
                      f"learner {r['recurrent_learner']})", flush=True)
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                Path(args.out).write_text(json.dumps({"meta": run_meta(), "results": rows},
                                                     indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
