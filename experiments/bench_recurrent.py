"""The recurrent learner's cost: a GRU update against the MLP's at the same size.

MPE ``simple_spread`` at JaxMARL's IPPO-RNN settings (``ippo_rnn_mpe.yaml``: 16
envs x 128 steps, GRU 128 over a 128-unit embedding, relu, 4 epochs x 2
minibatches, clip 0.3, value coefficient 1.0, lr 5e-4 annealed) and at a GPU
size (1,024 envs x 32 steps, the same model). Each row times ``Trainer.run``
(rollout + GAE + PPO update; compile apart, warm-up, median of --repeats calls,
``block_until_ready``), compiled as the CLI compiles it (`jaxwarp.train.jit`):

* ``gru``: the shipped model; the learner runs its sequence form (only the
  cell is scanned, one matmul a step);
* ``gru_steps``: the same model without its sequence form, replayed step by
  step (the learner's previous path);
* ``gru_vjp``: a variant under measurement: the sequence form with a
  hand-written backward of the cell's scan (one matmul a step back, the
  recurrent weights' gradient as one matmul over all T x B rows after it);
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
from typing import Any

import jax
import jax.numpy as jnp

import bench_train  # noqa: F401  (registers the model gru_steps)
from jaxwarp.benchmark import run_meta
from jaxwarp.models import GRUActorCritic, register_model
from jaxwarp.models.layers import ACTIVATIONS
from jaxwarp.models.recurrent import _dense
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


@jax.custom_vjp
def gru_scan(xs: jax.Array, w_rec: jax.Array, b_hn: jax.Array, h0: jax.Array,
             reset: jax.Array) -> tuple[jax.Array, jax.Array]:
    """flax.linen.GRUCell over xs [T, ..., 3H] (the gates' input projections,
    biases added), reset bool[T, ...], from h0 [..., H]: (h_T, h_1..T)."""
    return _gru_fwd(xs, w_rec, b_hn, h0, reset)[0]


def _gru_fwd(xs, w_rec, b_hn, h0, reset):
    def step(h, inp):
        x_t, r_t = inp
        h_in = jnp.where(r_t[..., None], jnp.zeros_like(h), h)
        xr, xz, xn = jnp.split(x_t, 3, axis=-1)
        hr, hz, hn = jnp.split(_dense({"kernel": w_rec}, h_in), 3, axis=-1)
        r, z, hnb = jax.nn.sigmoid(xr + hr), jax.nn.sigmoid(xz + hz), hn + b_hn
        n = jnp.tanh(xn + r * hnb)
        h = (1.0 - z) * n + z * h_in
        return h, (h, (h_in, r, z, n, hnb))

    h_t, (ys, saved) = jax.lax.scan(step, h0, (xs, reset))
    return (h_t, ys), (saved, w_rec, reset)


def _gru_bwd(res, cts):
    (h_in, r, z, n, hnb), w_rec, reset = res
    d_ht, d_ys = cts

    def step(dh, inp):
        d_y, h_in_t, r_t, z_t, n_t, hnb_t, reset_t = inp
        dh = dh + d_y
        dnp = dh * (1.0 - z_t) * (1.0 - n_t * n_t)
        dzp = dh * (h_in_t - n_t) * z_t * (1.0 - z_t)
        drp = dnp * hnb_t * r_t * (1.0 - r_t)
        dhs = jnp.concatenate([drp, dzp, dnp * r_t], axis=-1)
        dh_in = dh * z_t + jax.lax.dot_general(dhs, w_rec, (((dhs.ndim - 1,), (1,)), ((), ())))
        dh_prev = jnp.where(reset_t[..., None], jnp.zeros_like(dh_in), dh_in)
        return dh_prev, (jnp.concatenate([drp, dzp, dnp], axis=-1), dhs)

    dh0, (dxs, dhs) = jax.lax.scan(step, d_ht, (d_ys, h_in, r, z, n, hnb, reset), reverse=True)
    hh = h_in.reshape(-1, h_in.shape[-1])
    dw = hh.T @ dhs.reshape(-1, dhs.shape[-1])  # one matmul over all T x B rows
    size = h_in.shape[-1]
    db = dhs[..., 2 * size:].reshape(-1, size).sum(0)
    return dxs, dw, db, dh0, None


gru_scan.defvjp(_gru_fwd, _gru_bwd)


class VJPGRU(GRUActorCritic):
    """GRUActorCritic whose sequence form scans the cell through `gru_scan`."""

    def sequence(self, carry, obs, reset):
        p, act, k = self.variables["params"], ACTIVATIONS[self.activation], len(self.hidden_sizes)
        x = obs.astype(jnp.float32)
        for i in range(k):
            x = act(_dense(p[f"Dense_{i}"], x))
        cell = p["GRUCell_0"]
        gates = ("ir", "iz", "in")
        xs = _dense({"kernel": jnp.concatenate([cell[g]["kernel"] for g in gates], -1),
                     "bias": jnp.concatenate([cell[g]["bias"] for g in gates])}, x)
        w_rec = jnp.concatenate([cell[g]["kernel"] for g in ("hr", "hz", "hn")], -1)
        carry, x = gru_scan(xs, w_rec, cell["hn"]["bias"], carry, reset)
        logits = _dense(p[f"Dense_{k + 1}"], act(_dense(p[f"Dense_{k}"], x)))
        value = _dense(p[f"Dense_{k + 3}"], act(_dense(p[f"Dense_{k + 2}"], x)))
        return carry, (logits, jnp.squeeze(value, -1))


register_model("gru_vjp", lambda nvec, p: VJPGRU(
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
    ap.add_argument("--models", default="gru,gru_steps,gru_vjp,mlp")
    ap.add_argument("--command-buffers", default="gru,gru_vjp",
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
