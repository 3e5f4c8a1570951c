"""Does the fused Mosaic GPU kernel pair pay in a real PPO update? (MPE at GPU size, bf16 64-64.)

Issue 51's step after the two kernel benches: ``bench_mosaic_mlp.py``'s forward
(``fused_mlp``: the shared-torso ``mlp``'s whole forward in one kernel, a
``[rows, 16]`` float32 slab of logits then value) and ``bench_mosaic_mlp_bwd.py``'s
backward (``fused_mlp_bwd``: every weight and bias gradient from the heads'
gradient in one kernel, D = H = 64) become one Flax model, `FusedMLP`, whose
forward is a ``jax.custom_vjp`` of the pair. It has the shipped ``mlp``'s maths
and parameters (``MLPActorCritic(shared_torso=True, dtype=bfloat16)``: the
same ``Dense_0..Dense_3`` names, shapes, float32 dtypes and initialisers, so
the same seed gives the same initial parameters), returns float32 logits
``[..., A]`` and value ``[...]``, and is handed to the trainer through the
public user-model route (``build_trainer(config, models={"agent": module})``,
docs/models.md). Eligible: bf16, hidden [64, 64], obs dim <= 64 (zero-padded to
64 columns, W1 with zero rows), tanh or relu, A <= 15 logits (+ value: the
forward's 16 heads' columns); rows padded to a multiple of 256 (the forward's
row block; the backward's is 128) with zero heads' gradient, so padding adds
nothing to any gradient. The observations take no gradient (zero cotangent).

Sides (models of group ``agent`` of ``mpe_simple_spread_ppo``, one process,
the same seed and config; each in its own try/except):

* ``mlp``: the shipped model (at 64 wide and bf16 it runs XLA's layers,
  ``Trainer.model_layers`` says so), XLA's autodiff via its ``_linear`` vjp;
* ``mosaic``: `FusedMLP` on the two Mosaic GPU kernels;
* ``emulated``: `FusedMLP` with both kernels replaced by XLA ops of the same
  maths and roundings (the custom_vjp's plumbing -- padding, packing, the
  slab's slices -- without the kernels: what the kernels themselves buy).

Per side: compile time, the median over ``--repeats`` calls of ``--updates``
whole training updates (rollout of num_envs x num_steps, GAE, 4 epochs x 4
minibatches of PPO), env-steps/s, the rollouts alone (so the learner's share
is the difference, as ``bench_train.py``), and the first update's losses
(loss, policy, value, entropy, KL: their difference to ``mlp``'s is within
bf16 tolerance when the kernels are right: actions sampled from logits that
differ in rounding diverge a little). Before that, `check_models`: forward
outputs and every parameter's gradient (of a fixed random linear function of
logits and value) of `FusedMLP` and of the shipped ``mlp`` on random
parameters and 3,000 rows of random observations (not a multiple of 256),
each against the same model in float32 at full matmul precision.

    python experiments/bench_mosaic_learner.py            # tanh; 1024 envs x 32 steps
    python experiments/bench_mosaic_learner.py --quick    # mlp and mosaic only, fewer updates
    python experiments/bench_mosaic_learner.py --quick --out /tmp/x.json   # no GPU: checks only

Without a GPU the ``mlp`` and ``emulated`` sides train on the CPU at a tiny
size (16 envs x 8 steps) and the check runs with the emulated kernels; the
``mosaic`` side is lowered for CUDA (``jax.export``: the model's loss and
gradient at the GPU size's minibatch and rollout shapes) where a jax-cuda
plugin is installed, else reported ``skipped: no GPU``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import statistics
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:  # the kernel benches beside this file (they put the checkout on the path)
    sys.path.insert(0, HERE)

import bench_mosaic_layer as layer_bench
from bench_mosaic_mlp import fused_mlp, head_width, mlp_tiles
from bench_mosaic_mlp_bwd import BWD_HEADS, _derivative, bwd_tiles, fused_mlp_bwd
from bench_train import rollout_seconds, timed_calls

from jaxwarp.benchmark import run_meta, write_result
from jaxwarp.models import MLPActorCritic
from jaxwarp.models.layers import orthogonal
from jaxwarp.models.mlp import DenseParams
from jaxwarp.train import build_trainer, jit, load_config

WIDTH = 64  # D (padded) = H: the backward kernel's one shape
ROW_PAD = 256  # the forward's row block (2 warpgroups x 128); the backward's (128) divides it
MAX_LOGITS = 15  # + the value: the forward's 16 heads' columns
SIDES = ("mlp", "mosaic", "emulated")
LOSSES = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl")
# compared with mlp's within bf16 tolerance (relative); the policy loss and the KL are near
# zero at the first update, so relative differences of them say little (they are reported)
CHECKED_LOSSES = ("loss", "value_loss", "entropy")
GROUP = "agent"
# (num_envs, num_steps, updates a timed call): bench_time_to_return's gpu scale for MPE; a CPU's
GPU_SIZE, CPU_SIZE = (1024, 32, 20), (16, 8, 2)
TOL_BF16 = layer_bench.TOL["bf16"]  # largest |error| / largest |reference| of bf16 outputs


# --- the model -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Spec:
    """How the slab is computed: `impl` "mosaic" (the two kernels) or
    "emulated" (XLA ops, same maths); the activation; SMs (None: the device's)."""
    act: str
    impl: str = "mosaic"
    sms: int | None = None
    semantics: str = "warpgroup"


def emulated_fwd(x, w1, b1, w2, b2, wh, bh, *, act: str) -> jax.Array:
    """`fused_mlp`'s slab by XLA ops: x [M, 64] bf16, w1 [64, H], w2 [H, H],
    wh [H, NH] bf16, biases float32 -> [M, NH] float32 (hidden layers
    rounded to bf16 after bias and activation in float32)."""
    h1 = layer_bench.xla_layer(x, w1, b1, act)
    h2 = layer_bench.xla_layer(h1, w2, b2, act)
    return layer_bench.xla_layer(h2, wh, bh, "none", jnp.float32)


def emulated_bwd(x, dy, w1, b1, w2, b2, wh, bh, *, act: str) -> tuple[jax.Array, ...]:
    """`fused_mlp_bwd`'s six float32 gradients by XLA ops with the kernel's
    roundings: x [M, 64], dy [M, NH] bf16 -> dw1 [64, H], db1 [H], dw2 [H, H],
    db2 [H], dwh [H, NH], dbh [NH] (forward recomputed; h1, h2, dz1, dz2 bf16
    before the weight gradients' matmuls; bias gradients: sums of bf16 dz)."""
    del bh  # the heads' bias takes no part in any gradient
    f32, bf16 = jnp.float32, jnp.bfloat16

    def dot(a, b):
        return jnp.dot(a, b, preferred_element_type=f32)
    h1 = layer_bench.activation(dot(x, w1) + b1, act)
    h1b = h1.astype(bf16)
    h2 = layer_bench.activation(dot(h1b, w2) + b2, act)
    dz2 = _derivative(act, h2, dot(dy, wh.T)).astype(bf16)
    dz1 = _derivative(act, h1, dot(dz2, w2.T)).astype(bf16)
    return (dot(x.T, dz1), dz1.sum(0, dtype=f32), dot(h1b.T, dz2), dz2.sum(0, dtype=f32),
            dot(h2.astype(bf16).T, dy), dy.sum(0, dtype=f32))


def _bf16_weights(w1, b1, w2, b2, wh, bh) -> tuple[jax.Array, ...]:
    """The kernels' operands: matrices in bf16, biases kept float32."""
    bf16 = jnp.bfloat16
    return w1.astype(bf16), b1, w2.astype(bf16), b2, wh.astype(bf16), bh


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def heads_slab(spec: Spec, x, w1, b1, w2, b2, wh, bh) -> jax.Array:
    """The heads' slab [M, NH] float32 (logits, value, zeros) of x [M, 64]
    bf16 (M a multiple of 256) with float32 parameters w1 [64, 64], b1 [64],
    w2 [64, 64], b2 [64], wh [64, NH], bh [NH]; gradients (float32, for the
    parameters; zero for x) by the backward kernel (`_slab_bwd`)."""
    return _slab_fwd(spec, x, w1, b1, w2, b2, wh, bh)[0]


def _slab_fwd(spec: Spec, x, *params):
    ws = _bf16_weights(*params)
    if spec.impl == "mosaic":
        tiles = mlp_tiles(WIDTH, WIDTH, ws[4].shape[1], spec.semantics)
        slab = fused_mlp(x, *ws, act=spec.act, tiles=tiles, sms=spec.sms)
    else:
        slab = emulated_fwd(x, *ws, act=spec.act)
    return slab, (x, ws)


def _slab_bwd(spec: Spec, res, dslab):
    """dslab [M, NH] float32 -> bf16 (as the shipped mlp's bf16 heads get it),
    widened to the backward kernel's BWD_HEADS columns with zeros."""
    x, ws = res
    nh = dslab.shape[1]
    dy = dslab.astype(jnp.bfloat16)
    if spec.impl == "mosaic":
        dy = jnp.pad(dy, ((0, 0), (0, BWD_HEADS - nh)))
        tiles = bwd_tiles(WIDTH, WIDTH, BWD_HEADS, spec.semantics)
        grads = fused_mlp_bwd(x, dy, *ws, act=spec.act, tiles=tiles, sms=spec.sms)
    else:
        grads = emulated_bwd(x, dy, *ws, act=spec.act)
    dw1, db1, dw2, db2, dwh, dbh = grads
    return jnp.zeros_like(x), dw1, db1, dw2, db2, dwh[:, :nh], dbh[:nh]


heads_slab.defvjp(_slab_fwd, _slab_bwd)


def why_not(obs_dim: int, num_logits: int, hidden: Sequence[int], act: str, dtype: Any) -> str:
    """"" where `FusedMLP` applies, else why not (one line)."""
    if jnp.dtype(dtype) != jnp.bfloat16:
        return f"dtype {jnp.dtype(dtype).name} (only bfloat16)"
    if tuple(hidden) != (WIDTH, WIDTH):
        return f"hidden_sizes {list(hidden)} (only [64, 64])"
    if obs_dim > WIDTH:
        return f"{obs_dim} observation features (at most {WIDTH})"
    if act not in ("tanh", "relu"):
        return f"activation {act} (tanh or relu)"
    if num_logits > MAX_LOGITS:
        return f"{num_logits} logits (at most {MAX_LOGITS})"
    return ""


class FusedMLP(nn.Module):
    """The shipped shared-torso bf16 ``mlp`` (64-64) on the fused kernel pair.

    obs f32[..., D] (D <= 64) -> (logits f32[..., A], value f32[...]);
    parameters float32, named and initialised as ``MLPActorCritic``'s with
    ``shared_torso=True``: Dense_0 [D, 64], Dense_1 [64, 64] (orthogonal
    sqrt 2), Dense_2 [64, A] (policy, 0.01), Dense_3 [64, 1] (value, 1.0),
    zero biases."""

    action_dims: Sequence[int]
    activation: str = "tanh"
    impl: str = "mosaic"
    sms: int | None = None

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        d, a = obs.shape[-1], int(sum(self.action_dims))
        why = why_not(d, a, (WIDTH, WIDTH), self.activation, jnp.bfloat16)
        if why:
            raise ValueError(f"FusedMLP does not apply: {why}")
        (k1, b1), (k2, b2) = (DenseParams(WIDTH, orthogonal(np.sqrt(2)), name=f"Dense_{i}")(n)
                              for i, n in ((0, d), (1, WIDTH)))
        kp, bp = DenseParams(a, orthogonal(0.01), name="Dense_2")(WIDTH)
        kv, bv = DenseParams(1, orthogonal(1.0), name="Dense_3")(WIDTH)
        lead = obs.shape[:-1]
        x = obs.reshape(-1, d).astype(jnp.bfloat16)
        m = x.shape[0]
        x = jnp.pad(x, ((0, -(-m // ROW_PAD) * ROW_PAD - m), (0, WIDTH - d)))
        nh = head_width(a)
        wh = jnp.pad(jnp.concatenate([kp, kv], 1), ((0, 0), (0, nh - a - 1)))
        bh = jnp.pad(jnp.concatenate([bp, bv]), (0, nh - a - 1))
        spec = Spec(self.activation, self.impl, self.sms)
        slab = heads_slab(spec, x, jnp.pad(k1, ((0, WIDTH - d), (0, 0))), b1, k2, b2, wh, bh)
        return slab[:m, :a].reshape(*lead, a), slab[:m, a].reshape(lead)


def fused_factory(impl: str):
    """A model factory ``(nvec, policy_config) -> FusedMLP`` (register_model's
    form); refuses a policy the kernels do not fit, in one line."""
    def make(nvec: Sequence[int], p: Any) -> FusedMLP:
        why = why_not(0, int(sum(nvec)), p.hidden_sizes, p.activation, p.dtype)
        if why or not p.shared_torso:
            raise ValueError(f"FusedMLP does not apply: {why or 'separate torsos'}")
        return FusedMLP(tuple(int(n) for n in nvec), p.activation, impl)
    return make


# --- the check: forward and gradients against the shipped mlp ---------------------------------


def random_params(params: Any, key: jax.Array) -> Any:
    """`params`' tree with kernels ~ N(0, 1 / fan_in) and biases ~ 0.1 N(0, 1)
    (float32; every output O(1), unlike the near-zero policy head at init)."""
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(key, len(leaves))
    out = [jax.random.normal(k, p.shape, jnp.float32) * (
        1 / np.sqrt(p.shape[0]) if p.ndim == 2 else 0.1) for k, p in zip(keys, leaves)]
    return jax.tree.unflatten(tree, out)


def outputs_and_grads(net: nn.Module, params: Any, obs: jax.Array, coef: tuple) -> tuple:
    """({"logits": f32[..., A], "value": f32[...]}, the gradient of
    sum(logits c_l + value c_v) / rows with respect to the parameters)."""
    rows = obs.size // obs.shape[-1]

    def loss(p):
        logits, value = net.apply(p, obs)
        total = jnp.sum(logits * coef[0]) + jnp.sum(value * coef[1])
        return total / rows, {"logits": logits, "value": value}
    grads, out = jax.jit(jax.grad(loss, has_aux=True))(params)
    return out, grads


def rel_errors(got: Any, want: Any) -> dict[str, float]:
    """Leaf path -> largest |got - want| over largest |want| (float32)."""
    flat = jax.tree_util.tree_flatten_with_path(want)[0]
    errs = {}
    for (path, w), g in zip(flat, jax.tree.leaves(got)):
        name = "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)
        w, g = np.asarray(w, np.float32), np.asarray(g, np.float32)
        scale = float(np.max(np.abs(w))) or 1.0
        errs[name] = float(np.max(np.abs(g - w))) / scale if np.all(np.isfinite(g)) else np.inf
    return errs


def errors(got: tuple, want: tuple) -> dict[str, dict[str, float]]:
    """rel_errors of (outputs, gradients) pairs: {"outputs": ..., "grads": ...}."""
    return {"outputs": rel_errors(got[0], want[0]), "grads": rel_errors(got[1], want[1])}


def worst(errs: dict[str, dict[str, float]]) -> float:
    return max(max(v.values()) for v in errs.values())


def past_bound(errs: dict, bound: dict | float) -> list[str]:
    """The leaves of `errs` past `bound` (a number, or errs-shaped: per leaf)."""
    return [f"{part} {name} {e:.1e}" for part, leaves in errs.items() for name, e in leaves.items()
            if not e <= (bound if isinstance(bound, float) else bound[part][name])]


def check_models(act: str, impls: Sequence[str], obs_dim: int, actions: int,
                 shape: tuple[int, ...] = (4, 250, 3)) -> dict[str, Any]:
    """`FusedMLP` (each impl) and the shipped bf16 ``mlp`` against the float32
    ``mlp`` at full matmul precision, on random parameters and observations
    f32[*shape, obs_dim] (3,000 rows: padded to 3,072): outputs and every
    gradient's relative error (rel_errors). Check ok where one key gives both
    models the same initial parameters, each impl is within bf16 tolerance of
    the float32 model or at most twice as far as the shipped mlp (bf16 relu's
    gradients are 7e-2 off at these sizes for both: masks flip near zero), and
    mosaic is within bf16 tolerance of emulated (the same maths and roundings)."""
    k_obs, k_par, k_c1, k_c2 = jax.random.split(jax.random.PRNGKey(7), 4)
    obs = jax.random.normal(k_obs, (*shape, obs_dim), jnp.float32)
    ship = MLPActorCritic((actions,), (WIDTH, WIDTH), act, True, jnp.dtype(jnp.bfloat16))
    init = ship.init(k_par, obs)
    same_init = jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)), init,
                                          FusedMLP((actions,), act, "emulated").init(k_par, obs)))
    params = random_params(init, k_par)
    coef = (jax.random.normal(k_c1, (*shape, actions)), jax.random.normal(k_c2, shape))
    with jax.default_matmul_precision("highest"):
        want = outputs_and_grads(ship.clone(dtype=jnp.dtype(jnp.float32)), params, obs, coef)
    got = {"mlp": outputs_and_grads(ship, params, obs, coef)}
    got.update({i: outputs_and_grads(FusedMLP((actions,), act, i), params, obs, coef)
                for i in impls})
    out: dict[str, Any] = {"rows": int(np.prod(shape)), "obs_dim": obs_dim, "actions": actions,
                           "initial_params_equal": same_init}
    out.update({f"{k}_vs_f32": errors(v, want) for k, v in got.items()})
    bound = jax.tree.map(lambda e: max(TOL_BF16, 2 * e), out["mlp_vs_f32"])
    bad = [] if same_init else ["initial parameters differ"]
    for i in impls:
        out[f"{i}_vs_mlp"] = errors(got[i], got["mlp"])
        out[f"{i}_max_rel_err_vs_f32"] = worst(out[f"{i}_vs_f32"])
        bad += [f"{i} vs f32: {e}" for e in past_bound(out[f"{i}_vs_f32"], bound)]
    out["mlp_max_rel_err_vs_f32"] = worst(out["mlp_vs_f32"])
    if "mosaic" in impls and "emulated" in impls:
        out["mosaic_vs_emulated"] = errors(got["mosaic"], got["emulated"])
        out["mosaic_max_rel_err_vs_emulated"] = worst(out["mosaic_vs_emulated"])
        bad += [f"mosaic vs emulated: {e}" for e in past_bound(out["mosaic_vs_emulated"],
                                                                TOL_BF16)]
    out["check"] = "ok" if not bad else "failed: " + "; ".join(bad)
    return out


def lower_mosaic(act: str, obs_dim: int, actions: int, shapes: Sequence[tuple[int, ...]]) -> str:
    """Without a GPU: the mosaic model's loss and gradient lowered for CUDA
    (jax.export) at each obs shape [*shape, obs_dim]; what was checked."""
    import importlib
    try:
        importlib.import_module("jax._src.lib.mosaic_gpu")
    except Exception:  # noqa: BLE001
        return "skipped: no GPU (Mosaic GPU bindings absent; lowering not checked)"
    net = FusedMLP((actions,), act, "mosaic", sms=132)
    params = jax.eval_shape(net.init, jax.random.PRNGKey(0), jnp.zeros((1, obs_dim)))

    def loss(p, o):
        logits, value = net.apply(p, o)
        return jnp.sum(logits) + jnp.sum(value)
    for shape in shapes:
        obs = jax.ShapeDtypeStruct((*shape, obs_dim), jnp.float32)
        jax.export.export(jax.jit(jax.value_and_grad(loss)), platforms=["cuda"])(params, obs)
    return f"skipped: no GPU (lowered for cuda: ok, obs {[list(s) for s in shapes]})"


# --- the training sides ----------------------------------------------------------------------


def overrides(args: argparse.Namespace, act: str, backend: str) -> list[str]:
    """mpe_simple_spread_ppo at bench_time_to_return's gpu scale for MPE
    (JaxMARL's IPPO settings, 64x the envs), shared torso, bf16, 64-64."""
    p = f"policies.{GROUP}"
    return [f"num_envs={args.num_envs}", f"num_steps={args.num_steps}", "update_epochs=4",
            "num_minibatches=4", "total_env_steps=20000000", f"backend={backend}",
            "normalize_obs=false", "obs_dtype=float32", f"seed={args.seed}", "devices=1",
            f"{p}.model=mlp", f"{p}.hidden_sizes=[64, 64]", f"{p}.activation={act}",
            f"{p}.shared_torso=true", f"{p}.dtype=bfloat16", f"{p}.lr=0.00025"]


def env_shapes(config: Any) -> tuple[tuple[int, ...], int, int]:
    """(nvec, observation features, agents) of `config`'s env (its pure-JAX
    twin: only the spaces are read)."""
    import jaxwarp
    env = jaxwarp.make(config.env, backend="jax", config=config.env_config)
    nvec = tuple(int(n) for n in env.action_space.nvec)
    return nvec, int(env.observation_space.shape[-1]), int(env.num_agents)


def train_side(side: str, act: str, args: argparse.Namespace, backend: str
               ) -> tuple[dict[str, Any], Any]:
    """(one side's result, its initial parameters): the trainer with the
    side's model (`FusedMLP` through ``models=``), compiled and timed."""
    config = load_config("mpe_simple_spread_ppo", overrides(args, act, backend))
    models = None if side == "mlp" else {
        GROUP: fused_factory(side)(env_shapes(config)[0], config.policy(GROUP))}
    trainer = build_trainer(config, models=models)
    state = jax.jit(trainer.init)(jax.random.PRNGKey(args.seed))
    params0 = jax.device_get(state.learner.params)
    run = jit(lambda s: trainer.run(s, args.updates), config.deterministic, donate_argnums=0)
    t = time.perf_counter()
    compiled = run.lower(state).compile()
    compile_s = time.perf_counter() - t
    roll_s, roll_error = None, None
    if args.rollout_split:  # a failure here (the trainer's API moved) leaves the rest
        try:
            roll_s = rollout_seconds(trainer, state, args.updates, args.repeats)
        except Exception as e:  # noqa: BLE001
            roll_error = layer_bench.first_lines(e, 3)
    state, first, _, times = timed_calls(compiled, state, args.repeats)
    sec = statistics.median(times) / args.updates
    return {"model": type(trainer.models[GROUP]).__name__,
            "model_layers": dict(trainer.model_layers or {}), "rollout": trainer.rollout_path,
            "backend": trainer.env.backend, "compile_s": compile_s, "seconds_per_update": sec,
            "env_steps_per_s": trainer.derived.batch_env_steps / sec, "times_s": times,
            "rollout_seconds_per_update": roll_s, "rollout_split_error": roll_error,
            "learner_seconds_per_update": None if roll_s is None else sec - roll_s,
            "first_update": {k: float(first[f"{GROUP}/{k}"][0]) for k in LOSSES},
            "losses_finite": bool(all(np.all(np.isfinite(first[f"{GROUP}/{k}"]))
                                      for k in LOSSES))}, params0


def measure(side: str, act: str, args: argparse.Namespace, gpu: bool) -> tuple[dict, Any]:
    """train_side in a try/except (a side that fails is a finding); without a
    GPU the mosaic side is lowered for CUDA at the GPU size's shapes instead."""
    t = time.perf_counter()
    r: dict[str, Any] = {}
    params0 = None
    try:
        if side == "mosaic" and not gpu:
            config = load_config("mpe_simple_spread_ppo", overrides(args, act, "cpu"))
            nvec, obs_dim, agents = env_shapes(config)
            envs, steps, _ = GPU_SIZE  # a minibatch of the learner (4 of them) and a rollout step
            r["status"] = lower_mosaic(act, obs_dim, int(sum(nvec)),
                                       [(steps, envs // 4, agents), (envs, agents)])
        else:
            r, params0 = train_side(side, act, args, "cuda" if gpu else "cpu")
    except Exception as e:  # noqa: BLE001
        r = {"status": "error: " + layer_bench.first_lines(e),
             "detail": traceback.format_exc()[-3000:]}
        if args.traceback:
            traceback.print_exc()
    r["side_s"] = time.perf_counter() - t
    return r, params0


def compare(entry: dict[str, Any], params: dict[str, Any]) -> None:
    """Each side against mlp: speed, the first update's losses (difference,
    and relative to mlp's), whether its initial parameters equal mlp's."""
    base = entry["sides"].get("mlp", {})
    for side, r in entry["sides"].items():
        if side == "mlp" or "seconds_per_update" not in r or "seconds_per_update" not in base:
            continue
        r["speed_vs_mlp"] = base["seconds_per_update"] / r["seconds_per_update"]
        if r.get("learner_seconds_per_update") and base.get("learner_seconds_per_update"):
            r["learner_speed_vs_mlp"] = (base["learner_seconds_per_update"]
                                         / r["learner_seconds_per_update"])
        diff = {k: r["first_update"][k] - base["first_update"][k] for k in LOSSES}
        r["first_update_diff"] = diff
        rel = {k: abs(diff[k]) / (abs(base["first_update"][k]) or 1.0) for k in LOSSES}
        r["first_update_rel_diff"] = rel
        off = [f"{k} {rel[k]:.1e}" for k in CHECKED_LOSSES if not rel[k] <= TOL_BF16]
        r["first_update_check"] = "ok" if not off else (
            f"failed: first update's {', '.join(off)} relative to mlp's > {TOL_BF16:.1e}")
        if params.get("mlp") is not None and params.get(side) is not None:
            r["initial_params_equal_mlp"] = jax.tree.all(jax.tree.map(
                np.array_equal, params["mlp"], params[side]))


def describe(side: str, r: dict[str, Any]) -> str:
    if "seconds_per_update" not in r:
        return f"  {side:9s} {r.get('status', '')}"
    roll = r.get("rollout_seconds_per_update")
    split = "" if roll is None else (f" (rollout {1e3 * roll:.2f} ms, learner "
                                     f"{1e3 * r['learner_seconds_per_update']:.2f} ms)")
    speed = f" {r['speed_vs_mlp']:.2f}x mlp" if "speed_vs_mlp" in r else ""
    loss = r["first_update"]["loss"]
    diff = (f", diff to mlp {r['first_update_diff']['loss']:+.2e}"
            if "first_update_diff" in r else "")
    return (f"  {side:9s} {r['env_steps_per_s'] / 1e6:7.3f}M env-steps/s, "
            f"{1e3 * r['seconds_per_update']:.2f} ms/update{split}{speed}; compile "
            f"{r['compile_s']:.0f} s; first update loss {loss:.5f}{diff}")


def run_checks(act: str, gpu: bool, obs_dim: int, actions: int) -> dict[str, Any]:
    """check_models of the mosaic kernels (GPU only) and the emulated ones, printed."""
    impls = (("mosaic",) if gpu else ()) + ("emulated",)
    try:
        out = check_models(act, impls, obs_dim, actions)
    except Exception as e:  # noqa: BLE001
        out = {"check": "error: " + layer_bench.first_lines(e),
               "detail": traceback.format_exc()[-3000:]}
    errs = ", ".join(f"{k[:-len('_max_rel_err_vs_f32')]} {v:.1e}" for k, v in out.items()
                     if k.endswith("_max_rel_err_vs_f32"))
    vs = out.get("mosaic_max_rel_err_vs_emulated")
    print(f"  check {'+'.join(impls)}: {out['check'][:300]}"
          + (f" (max rel err vs float32: {errs})" if errs else "")
          + ("" if vs is None else f"; mosaic vs emulated {vs:.1e}"), flush=True)
    return out


def run_act(act: str, args: argparse.Namespace, gpu: bool, data: dict[str, Any]) -> None:
    """The check and every side for one activation; the result written after each."""
    config = load_config("mpe_simple_spread_ppo", overrides(args, act, "jax"))
    nvec, obs_dim, agents = env_shapes(config)
    entry: dict[str, Any] = {"act": act, "nvec": list(nvec), "obs_dim": obs_dim,
                             "agents": agents, "sides": {}}
    data["results"].append(entry)
    print(f"{act}: {args.num_envs} envs x {args.num_steps} steps x {agents} agents, "
          f"obs {obs_dim}, logits {sum(nvec)}", flush=True)
    entry["check"] = run_checks(act, gpu, obs_dim, int(sum(nvec)))
    if entry["check"]["check"] != "ok":
        data["failures"].append(f"{act} check: {entry['check']['check']}")
    params: dict[str, Any] = {}
    for side in args.sides:
        entry["sides"][side], params[side] = measure(side, act, args, gpu)
        compare(entry, params)
        r = entry["sides"][side]
        if r.get("status", "").startswith("error"):
            data["failures"].append(f"{act} {side}: {r['status']}")
        if r.get("first_update_check", "ok") != "ok":
            data["failures"].append(f"{act} {side}: {r['first_update_check']}")
        print(describe(side, r), flush=True)
        write_result(args.out, data)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="sides mlp and mosaic, 10 updates a call, 3 repeats, no rollout split")
    ap.add_argument("--acts", default="tanh", help="of tanh (MPE's), relu")
    ap.add_argument("--sides", default=",".join(SIDES), help="a subset of " + ", ".join(SIDES))
    ap.add_argument("--num-envs", type=int, default=None, help="default: 1024 (GPU), 16 (CPU)")
    ap.add_argument("--num-steps", type=int, default=None, help="default: 32 (GPU), 8 (CPU)")
    ap.add_argument("--updates", type=int, default=None, help="updates a timed call")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls (median)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-rollout-split", dest="rollout_split", action="store_false",
                    help="skip timing the rollouts alone")
    ap.add_argument("--traceback", action="store_true", help="print whole tracebacks")
    ap.add_argument("--out", default="experiments/results/bench_mosaic_learner_h200.json")
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    start = time.perf_counter()
    gpu = jax.default_backend() == "gpu"
    envs, steps, updates = GPU_SIZE if gpu else CPU_SIZE
    args.num_envs, args.num_steps = args.num_envs or envs, args.num_steps or steps
    args.updates = args.updates or (10 if args.quick and gpu else updates)
    if not gpu:
        args.repeats = 1  # the CPU's times say nothing here
    elif args.quick:
        args.repeats = min(args.repeats, 3)
    args.rollout_split = args.rollout_split and not args.quick
    asked = args.sides.split(",")  # in SIDES' order: mlp first, the others compared with it
    args.sides = [s for s in SIDES if s in asked and not (args.quick and s == "emulated")]
    meta = run_meta(gpu=gpu, device_count=len(jax.devices()))
    print(f"{meta['device']}, jax {jax.__version__}, commit {meta['commit']}; sides "
          f"{','.join(args.sides)}; {args.updates} updates a call", flush=True)
    data: dict[str, Any] = {"meta": meta, "config": {
        "env_config": "mpe_simple_spread_ppo", "group": GROUP, "num_envs": args.num_envs,
        "num_steps": args.num_steps, "updates_per_call": args.updates, "repeats": args.repeats,
        "seed": args.seed, "acts": args.acts, "sides": args.sides, "row_pad": ROW_PAD,
        "tolerance": TOL_BF16, "rollout_split": args.rollout_split,
        "overrides": overrides(args, "ACT", "BACKEND")}, "results": [], "failures": []}
    for act in args.acts.split(","):
        run_act(act, args, gpu, data)
    data["elapsed_s"] = time.perf_counter() - start
    write_result(args.out, data)
    print(f"done in {data['elapsed_s']:.0f} s; {len(data['failures'])} failure(s)")
    for f in data["failures"]:
        print("  " + f.splitlines()[0])
    return 1 if data["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
