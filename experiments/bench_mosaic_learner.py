"""Does the fused Mosaic GPU kernel pair pay in a real update? (MPE 64-64; Tag 256-256 fwd only.)

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

Case ``tag_a2c`` (``--case tag_a2c``; the above is case ``mpe``, the
default): does the fused FORWARD kernel pay at Tag's scale, where the
rollout's forward runs 220K rows a step (2,000 envs x 110 agents) and the
learner's 256-wide matmuls dominate? ``tag_warpdrive_default`` as
``bench_train.py``'s GPU case 3 (``AT_2000 + BF16``: A2C, 2,000 envs x 50
steps, 4 epochs x 10 minibatches, both groups ``tagger`` and ``runner`` in
bf16, shared torso 256-256 relu as shipped); every group gets the side's model
(``models={"tagger": ..., "runner": ...}``). There is no backward kernel at
H = 256, so the kernel side is ``mosaic_fwd``: `FusedMLP` whose custom_vjp
runs the forward kernel and, for the backward, `emulated_bwd` (the plain XLA
reference forward's VJP: forward recomputed, float32 weight gradients; same
maths and parameters as the shipped ``mlp``). Tag's 71 observation features
are zero-padded to 80 (a multiple of 16: `padded_dim`); its heads (42 logits
+ value: 48 columns) with W1 [80, 256] and W2 [256, 256] resident need 241 KB
of shared memory at one stage, more than the 227 KB an SM has, so the forward
runs as two kernel calls (heads' columns 32 + 16, 225 and 209 KB at one
stage, `head_chunks`), each recomputing the torso: printed as the case's
``forward_kernel`` line, and a shape no split fits makes the side ``skipped``
with the numbers. Sides: ``mlp`` (shipped; on CUDA at bf16 256-256 it runs
jaxwarp/models/mlp_kernel.py's Pallas (Triton) kernels, recorded as
``model_layers``), ``mosaic_fwd``, ``emulated`` (the same custom_vjp on XLA
ops: the slab in one XLA chain, so what ``mosaic_fwd`` gains over it is the
forward kernel's). Reported as above, plus agent-steps/s and every group's
first-update losses (``tagger/loss`` ...); 3 updates a call, 3 repeats (an
update is ~70 ms on an H200). No result file yet.

    python experiments/bench_mosaic_learner.py            # tanh; 1024 envs x 32 steps
    python experiments/bench_mosaic_learner.py --quick    # mlp and mosaic only, fewer updates
    python experiments/bench_mosaic_learner.py --quick --out /tmp/x.json   # no GPU: checks only
    python experiments/bench_mosaic_learner.py --case tag_a2c   # -> ..._tag_h200.json, ~2-3 min

Without a GPU the ``mlp`` and ``emulated`` sides train on the CPU at a tiny
size (mpe: 16 envs x 8 steps; tag_a2c: 10 envs x 4 steps, 1 update) and the
check runs with the emulated kernels; the kernel side (``mosaic``,
``mosaic_fwd``) is lowered for CUDA (``jax.export``: the model's loss and
gradient at the GPU size's minibatch and rollout shapes, each group's) where
a jax-cuda plugin is installed, else reported ``skipped: no GPU``.
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
from bench_mosaic_mlp import PLANS, MlpTiles, fused_mlp, head_width, mlp_tiles
from bench_mosaic_mlp_bwd import BWD_HEADS, _derivative, bwd_tiles, fused_mlp_bwd
from bench_train import AT_2000, BF16, rollout_seconds, timed_calls

from jaxwarp.benchmark import run_meta, write_result
from jaxwarp.models import MLPActorCritic
from jaxwarp.models.layers import orthogonal
from jaxwarp.models.mlp import DenseParams
from jaxwarp.train import build_trainer, jit, load_config
from jaxwarp.train.policy import Groups
from jaxwarp.units import rate_text

WIDTH = 64  # D (padded) = H: the backward kernel's one shape; D's least padding for both
ROW_PAD = 256  # the forward's row block (2 warpgroups x 128); the backward's (128) divides it
MAX_LOGITS = 15  # + the value: the forward's 16 heads' columns
SIDES = ("mlp", "mosaic", "emulated")  # the mpe case's
TAG_SIDES = ("mlp", "mosaic_fwd", "emulated")  # the tag_a2c case's
KERNEL_SIDES = ("mosaic", "mosaic_fwd")  # the sides that run Mosaic GPU kernels
LOSSES = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl")
# compared with mlp's within bf16 tolerance (relative); the policy loss and the KL are near
# zero at the first update, so relative differences of them say little (they are reported)
CHECKED_LOSSES = ("loss", "value_loss", "entropy")
GROUP = "agent"
TOL_BF16 = layer_bench.TOL["bf16"]  # largest |error| / largest |reference| of bf16 outputs


@dataclasses.dataclass(frozen=True)
class Case:
    """A bench case: the shipped config, its policy groups, sides (mlp first),
    the torso's width H, the default activation, (num_envs, num_steps,
    updates a timed call) on a GPU and on a CPU, updates a call under
    --quick, timed calls, the result file."""
    config: str
    groups: tuple[str, ...]
    sides: tuple[str, ...]
    hidden: int
    act: str
    gpu_size: tuple[int, int, int]
    cpu_size: tuple[int, int, int]
    quick_updates: int
    repeats: int
    out: str


CASES = {
    # bench_time_to_return's gpu scale for MPE; a CPU's
    "mpe": Case("mpe_simple_spread_ppo", (GROUP,), SIDES, WIDTH, "tanh", (1024, 32, 20),
                (16, 8, 2), 10, 5, "experiments/results/bench_mosaic_learner_h200.json"),
    # bench_train.py's GPU case 3 (AT_2000 + BF16): one update is ~70 ms on an H200
    "tag_a2c": Case("tag_warpdrive_default", ("tagger", "runner"), TAG_SIDES, 256, "relu",
                    (2000, 50, 3), (10, 4, 1), 3, 3,
                    "experiments/results/bench_mosaic_learner_tag_h200.json"),
}


# --- the model -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Spec:
    """How the slab is computed: `impl` "mosaic" (the two kernels),
    "mosaic_fwd" (the forward kernel; the backward by `emulated_bwd`) or
    "emulated" (XLA ops, same maths, both ways); the activation; SMs (None:
    the device's)."""
    act: str
    impl: str = "mosaic"
    sms: int | None = None
    semantics: str = "warpgroup"


def emulated_fwd(x, w1, b1, w2, b2, wh, bh, *, act: str) -> jax.Array:
    """`fused_mlp`'s slab by XLA ops: x [M, D] bf16, w1 [D, H], w2 [H, H],
    wh [H, NH] bf16, biases float32 -> [M, NH] float32 (hidden layers
    rounded to bf16 after bias and activation in float32)."""
    h1 = layer_bench.xla_layer(x, w1, b1, act)
    h2 = layer_bench.xla_layer(h1, w2, b2, act)
    return layer_bench.xla_layer(h2, wh, bh, "none", jnp.float32)


def emulated_bwd(x, dy, w1, b1, w2, b2, wh, bh, *, act: str) -> tuple[jax.Array, ...]:
    """`fused_mlp_bwd`'s six float32 gradients by XLA ops with the kernel's
    roundings: x [M, D], dy [M, NH] bf16 -> dw1 [D, H], db1 [H], dw2 [H, H],
    db2 [H], dwh [H, NH], dbh [NH] (forward recomputed; h1, h2, dz1, dz2 bf16
    before the weight gradients' matmuls; bias gradients: sums of bf16 dz).
    Any D, H, NH: it is also the "mosaic_fwd" model's backward, the plain XLA
    reference forward's VJP written out (float32 weight gradients, as the
    shipped bf16 mlp's)."""
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
    """The heads' slab [M, NH] float32 (logits, value, zeros) of x [M, D]
    bf16 (M a multiple of 256, D of 16) with float32 parameters w1 [D, H],
    b1 [H], w2 [H, H], b2 [H], wh [H, NH], bh [NH] (D = H = 64 for "mosaic");
    gradients (float32, for the parameters; zero for x) by `_slab_bwd`."""
    return _slab_fwd(spec, x, w1, b1, w2, b2, wh, bh)[0]


def head_chunks(d: int, h: int, nh: int, semantics: str) -> tuple[tuple[int, MlpTiles], ...]:
    """The heads' NH columns as the fewest forward-kernel calls whose shared
    memory fits (`mlp_tiles`): ((columns, tiles), ...), widest first, columns
    multiples of 16 summing to NH. Each call recomputes the torso (Tag's
    D = 80, H = 256, NH = 48 needs 241 KB at one stage: two calls of 32 + 16
    columns). Raises mlp_tiles' Skip where 16 columns a call do not fit."""
    units = nh // 16
    for k in range(1, units + 1):
        widths = [16 * (units // k + (i < units % k)) for i in range(k)]
        try:
            # PLANS[0] alone: two compute warpgroups, whole stores, as the recorded
            # runs had it (bench_mosaic_mlp's later plans fit Tag's 48 columns in one call).
            return tuple((w, mlp_tiles(d, h, w, semantics, None, PLANS[:1])) for w in widths)
        except layer_bench.Skip as e:
            last = e
    raise last


def kernel_slab(spec: Spec, x, w1, b1, w2, b2, wh, bh) -> jax.Array:
    """The slab [M, NH] float32 by the forward kernel (bf16 x [M, D] and
    matrices, float32 biases), one call per `head_chunks` chunk."""
    d, h = w1.shape
    parts, start = [], 0
    for cols, tiles in head_chunks(d, h, wh.shape[1], spec.semantics):
        whc, bhc = (wh, bh) if cols == wh.shape[1] else (wh[:, start:start + cols],
                                                          bh[start:start + cols])
        parts.append(fused_mlp(x, w1, b1, w2, b2, whc, bhc, act=spec.act, tiles=tiles,
                               sms=spec.sms))
        start += cols
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=1)


def _slab_fwd(spec: Spec, x, *params):
    ws = _bf16_weights(*params)
    if spec.impl in KERNEL_SIDES:
        slab = kernel_slab(spec, x, *ws)
    else:
        slab = emulated_fwd(x, *ws, act=spec.act)
    return slab, (x, ws)


def _slab_bwd(spec: Spec, res, dslab):
    """dslab [M, NH] float32 -> bf16 (as the shipped mlp's bf16 heads get it),
    widened to the backward kernel's BWD_HEADS columns with zeros ("mosaic");
    else `emulated_bwd` (the forward recomputed by XLA)."""
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


def why_not(obs_dim: int, num_logits: int, hidden: Sequence[int], act: str, dtype: Any,
            impl: str = "mosaic") -> str:
    """"" where `FusedMLP` with `impl` applies, else why not (one line). The
    pair ("mosaic") takes 64-64 only; the others two equal widths, multiples
    of 64 (the forward kernel's shared memory is checked when it is traced)."""
    if jnp.dtype(dtype) != jnp.bfloat16:
        return f"dtype {jnp.dtype(dtype).name} (only bfloat16)"
    if impl == "mosaic" and tuple(hidden) != (WIDTH, WIDTH):
        return f"hidden_sizes {list(hidden)} (only [64, 64])"
    if len(hidden) != 2 or hidden[0] != hidden[1] or hidden[0] % WIDTH:
        return f"hidden_sizes {list(hidden)} (two equal widths, multiples of {WIDTH})"
    if impl == "mosaic" and obs_dim > WIDTH:
        return f"{obs_dim} observation features (at most {WIDTH})"
    if act not in ("tanh", "relu"):
        return f"activation {act} (tanh or relu)"
    if impl == "mosaic" and num_logits > MAX_LOGITS:
        return f"{num_logits} logits (at most {MAX_LOGITS})"
    return ""


def padded_dim(d: int) -> int:
    """The kernels' observation columns: D zero-padded to a multiple of 16
    (the forward's K step), at least 64 (the backward's one D): MPE's 18 ->
    64, Tag's 71 -> 80."""
    return max(WIDTH, -(-d // 16) * 16)


class FusedMLP(nn.Module):
    """The shipped shared-torso bf16 ``mlp`` (H-H) on the fused kernels.

    obs f32[..., D] -> (logits f32[..., A], value f32[...]); parameters
    float32, named and initialised as ``MLPActorCritic``'s with
    ``shared_torso=True``: Dense_0 [D, H], Dense_1 [H, H] (orthogonal
    sqrt 2), Dense_2 [H, A] (policy, 0.01), Dense_3 [H, 1] (value, 1.0),
    zero biases. `impl` "mosaic" (H = 64, D <= 64: the kernel pair),
    "mosaic_fwd" (any H multiple of 64: the forward kernel, XLA's backward)
    or "emulated" (XLA ops both ways); see `Spec`."""

    action_dims: Sequence[int]
    activation: str = "tanh"
    impl: str = "mosaic"
    sms: int | None = None
    hidden: int = WIDTH

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        d, a, hw = obs.shape[-1], int(sum(self.action_dims)), self.hidden
        why = why_not(d, a, (hw, hw), self.activation, jnp.bfloat16, self.impl)
        if why:
            raise ValueError(f"FusedMLP does not apply: {why}")
        (k1, b1), (k2, b2) = (DenseParams(hw, orthogonal(np.sqrt(2)), name=f"Dense_{i}")(n)
                              for i, n in ((0, d), (1, hw)))
        kp, bp = DenseParams(a, orthogonal(0.01), name="Dense_2")(hw)
        kv, bv = DenseParams(1, orthogonal(1.0), name="Dense_3")(hw)
        lead, dp = obs.shape[:-1], padded_dim(d)
        x = obs.reshape(-1, d).astype(jnp.bfloat16)
        m = x.shape[0]
        x = jnp.pad(x, ((0, -(-m // ROW_PAD) * ROW_PAD - m), (0, dp - d)))
        nh = head_width(a)
        wh = jnp.pad(jnp.concatenate([kp, kv], 1), ((0, 0), (0, nh - a - 1)))
        bh = jnp.pad(jnp.concatenate([bp, bv]), (0, nh - a - 1))
        spec = Spec(self.activation, self.impl, self.sms)
        slab = heads_slab(spec, x, jnp.pad(k1, ((0, dp - d), (0, 0))), b1, k2, b2, wh, bh)
        return slab[:m, :a].reshape(*lead, a), slab[:m, a].reshape(lead)


def fused_factory(impl: str):
    """A model factory ``(nvec, policy_config) -> FusedMLP`` (register_model's
    form); refuses a policy the kernels do not fit, in one line."""
    def make(nvec: Sequence[int], p: Any) -> FusedMLP:
        why = why_not(0, int(sum(nvec)), p.hidden_sizes, p.activation, p.dtype, impl)
        if why or not p.shared_torso:
            raise ValueError(f"FusedMLP does not apply: {why or 'separate torsos'}")
        return FusedMLP(tuple(int(n) for n in nvec), p.activation, impl,
                        hidden=int(p.hidden_sizes[0]))
    return make


def forward_plan(obs_dim: int, num_logits: int, hidden: int) -> str:
    """One line: how the forward kernel runs a model (D padded, head chunks,
    tiles), or why it cannot (shared memory)."""
    d, nh = padded_dim(obs_dim), head_width(num_logits)
    shape = f"forward kernel at D {obs_dim} -> {d}, H {hidden}, heads {nh} columns"
    try:
        chunks = head_chunks(d, hidden, nh, "warpgroup")
    except layer_bench.Skip as e:
        return f"{shape}: {e}"
    if len(chunks) == 1:
        return f"{shape}: one call ({chunks[0][1].label()})"
    try:
        mlp_tiles(d, hidden, nh, "warpgroup", None, PLANS[:1])
        why = "?"
    except layer_bench.Skip as e:
        why = str(e).removeprefix("skipped: ")
    calls = " + ".join(f"{c} ({t.label()})" for c, t in chunks)
    return (f"{shape}: one call {why}; runs as {len(chunks)} calls of {calls} head columns, "
            f"each recomputing the torso")


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


def check_models(act: str, impls: Sequence[str], obs_dim: int, nvec: tuple[int, ...],
                 hidden: int = WIDTH, shape: tuple[int, ...] = (4, 250, 3)) -> dict[str, Any]:
    """`FusedMLP` (each impl; H = `hidden`, action heads `nvec`, their
    logits concatenated) and the shipped bf16 ``mlp`` against the float32
    ``mlp`` at full matmul precision, on random parameters and observations
    f32[*shape, obs_dim] (3,000 rows: padded to 3,072): outputs and every
    gradient's relative error (rel_errors). Check ok where one key gives both
    models the same initial parameters, each impl is within bf16 tolerance of
    the float32 model or at most twice as far as the shipped mlp (bf16 relu's
    gradients are 7e-2 off at these sizes for both: masks flip near zero), and
    the kernel impl is within bf16 tolerance of emulated (same maths and roundings)."""
    k_obs, k_par, k_c1, k_c2 = jax.random.split(jax.random.PRNGKey(7), 4)
    obs = jax.random.normal(k_obs, (*shape, obs_dim), jnp.float32)
    actions = int(sum(nvec))
    ship = MLPActorCritic(nvec, (hidden, hidden), act, True, jnp.dtype(jnp.bfloat16))
    init = ship.init(k_par, obs)

    def fused(impl: str) -> FusedMLP:
        return FusedMLP(nvec, act, impl, hidden=hidden)
    same_init = jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)), init,
                                          fused("emulated").init(k_par, obs)))
    params = random_params(init, k_par)
    coef = (jax.random.normal(k_c1, (*shape, actions)), jax.random.normal(k_c2, shape))
    with jax.default_matmul_precision("highest"):
        want = outputs_and_grads(ship.clone(dtype=jnp.dtype(jnp.float32)), params, obs, coef)
    got = {"mlp": outputs_and_grads(ship, params, obs, coef)}
    got.update({i: outputs_and_grads(fused(i), params, obs, coef) for i in impls})
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
    for k in (i for i in impls if i in KERNEL_SIDES and "emulated" in impls):
        out[f"{k}_vs_emulated"] = errors(got[k], got["emulated"])
        out[f"{k}_max_rel_err_vs_emulated"] = worst(out[f"{k}_vs_emulated"])
        bad += [f"{k} vs emulated: {e}" for e in past_bound(out[f"{k}_vs_emulated"], TOL_BF16)]
    out["check"] = "ok" if not bad else "failed: " + "; ".join(bad)
    return out


def lower_mosaic(impl: str, act: str, obs_dim: int, nvec: tuple[int, ...], hidden: int,
                 shapes: Sequence[tuple[int, ...]]) -> str:
    """Without a GPU: the `impl` model's (a kernel side's) loss and gradient
    lowered for CUDA (jax.export) at each obs shape f32[*shape, obs_dim];
    what was checked."""
    import importlib
    try:
        importlib.import_module("jax._src.lib.mosaic_gpu")
    except Exception:  # noqa: BLE001
        return "skipped: no GPU (Mosaic GPU bindings absent; lowering not checked)"
    net = FusedMLP(nvec, act, impl, sms=132, hidden=hidden)
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
    """The case's overrides. mpe: mpe_simple_spread_ppo at
    bench_time_to_return's gpu scale for MPE (JaxMARL's IPPO settings, 64x
    the envs), shared torso, bf16, 64-64. tag_a2c: tag_warpdrive_default as
    bench_train.py's GPU case 3 (AT_2000 + BF16: A2C, 10 minibatches, both
    groups bf16; shared torso 256-256 as shipped) at the given size."""
    if args.case == "tag_a2c":
        return [*AT_2000, *BF16, f"num_envs={args.num_envs}", f"num_steps={args.num_steps}",
                f"backend={backend}", f"seed={args.seed}", "devices=1",
                *(f"policies.{g}.activation={act}" for g in CASES[args.case].groups)]
    p = f"policies.{GROUP}"
    return [f"num_envs={args.num_envs}", f"num_steps={args.num_steps}", "update_epochs=4",
            "num_minibatches=4", "total_env_steps=20000000", f"backend={backend}",
            "normalize_obs=false", "obs_dtype=float32", f"seed={args.seed}", "devices=1",
            f"{p}.model=mlp", f"{p}.hidden_sizes=[64, 64]", f"{p}.activation={act}",
            f"{p}.shared_torso=true", f"{p}.dtype=bfloat16", f"{p}.lr=0.00025"]


def env_shapes(config: Any) -> tuple[tuple[int, ...], int, int, dict[str, int]]:
    """(nvec, observation features, agents, policy group -> its agents) of
    `config`'s env (its pure-JAX twin: only the spaces are read; every agent
    has the same spaces)."""
    import jaxwarp
    env = jaxwarp.make(config.env, backend="jax", config=config.env_config)
    nvec = tuple(int(n) for n in env.action_space.nvec)
    groups = {g: len(ids) for g, ids in Groups.of(env).ids.items()}
    return nvec, int(env.observation_space.shape[-1]), int(env.num_agents), groups


def first_losses(first: dict[str, Any], groups: Sequence[str]) -> dict[str, float]:
    """The first update's LOSSES of each group: keyed by the loss's name for
    one group (mpe), else "group/loss"."""
    return {(k if len(groups) == 1 else f"{g}/{k}"): float(first[f"{g}/{k}"][0])
            for g in groups for k in LOSSES}


def train_side(side: str, act: str, args: argparse.Namespace, backend: str
               ) -> tuple[dict[str, Any], Any]:
    """(one side's result, its initial parameters): the trainer with the
    side's model (`FusedMLP` through ``models=``, every group), compiled and
    timed."""
    config = load_config(CASES[args.case].config, overrides(args, act, backend))
    nvec, _, agents, groups = env_shapes(config)
    models = None if side == "mlp" else {
        g: fused_factory(side)(nvec, config.policy(g)) for g in groups}
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
    return {"model": type(trainer.models[next(iter(groups))]).__name__,
            "model_layers": dict(trainer.model_layers or {}), "rollout": trainer.rollout_path,
            "backend": trainer.env.backend, "compile_s": compile_s, "seconds_per_update": sec,
            "env_steps_per_s": trainer.derived.batch_env_steps / sec,
            "agent_steps_per_s": trainer.derived.batch_env_steps * agents / sec, "times_s": times,
            "rollout_seconds_per_update": roll_s, "rollout_split_error": roll_error,
            "learner_seconds_per_update": None if roll_s is None else sec - roll_s,
            "first_update": first_losses(first, tuple(groups)),
            "losses_finite": bool(all(np.all(np.isfinite(first[f"{g}/{k}"]))
                                      for g in groups for k in LOSSES))}, params0


def measure(side: str, act: str, args: argparse.Namespace, gpu: bool) -> tuple[dict, Any]:
    """train_side in a try/except (a side that fails is a finding); without a
    GPU a kernel side is lowered for CUDA at the GPU size's shapes instead
    (each group's learner minibatch and rollout step)."""
    t = time.perf_counter()
    r: dict[str, Any] = {}
    params0 = None
    case = CASES[args.case]
    try:
        if side in KERNEL_SIDES and not gpu:
            config = load_config(case.config, overrides(args, act, "cpu"))
            nvec, obs_dim, _, groups = env_shapes(config)
            envs, steps, _ = case.gpu_size
            mb = config.num_minibatches
            shapes = [s for n in sorted(set(groups.values()), reverse=True)
                      for s in ((steps, envs // mb, n), (envs, n))]
            r["status"] = lower_mosaic(side, act, obs_dim, nvec, case.hidden, shapes)
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
        diff = {k: v - base["first_update"][k] for k, v in r["first_update"].items()}
        r["first_update_diff"] = diff
        rel = {k: abs(v) / (abs(base["first_update"][k]) or 1.0) for k, v in diff.items()}
        r["first_update_rel_diff"] = rel
        off = [f"{k} {v:.1e}" for k, v in rel.items()
               if k.split("/")[-1] in CHECKED_LOSSES and not v <= TOL_BF16]
        r["first_update_check"] = "ok" if not off else (
            f"failed: first update's {', '.join(off)} relative to mlp's > {TOL_BF16:.1e}")
        if params.get("mlp") is not None and params.get(side) is not None:
            r["initial_params_equal_mlp"] = jax.tree.all(jax.tree.map(
                np.array_equal, params["mlp"], params[side]))


def describe(side: str, r: dict[str, Any]) -> str:
    if "seconds_per_update" not in r:
        return f"  {side:10s} {r.get('status', '')}"
    roll = r.get("rollout_seconds_per_update")
    split = "" if roll is None else (f" (rollout {1e3 * roll:.2f} ms, learner "
                                     f"{1e3 * r['learner_seconds_per_update']:.2f} ms)")
    speed = f" {r['speed_vs_mlp']:.2f}x mlp" if "speed_vs_mlp" in r else ""
    keys = [k for k in r["first_update"] if k.split("/")[-1] == "loss"]
    loss = ", ".join(f"{k} {r['first_update'][k]:.5f}" + (
        f" (diff to mlp {r['first_update_diff'][k]:+.2e})" if "first_update_diff" in r else "")
        for k in keys)
    agents = round(r["agent_steps_per_s"] / r["env_steps_per_s"])
    return (f"  {side:10s} {rate_text(r['env_steps_per_s'], agents)}, "
            f"{1e3 * r['seconds_per_update']:.2f} ms/update{split}{speed}; compile "
            f"{r['compile_s']:.0f} s; first update {loss}")


def run_checks(act: str, gpu: bool, obs_dim: int, nvec: tuple[int, ...], case: Case
               ) -> dict[str, Any]:
    """check_models of the case's kernel side (GPU only) and the emulated one, printed."""
    kernel = next(s for s in case.sides if s in KERNEL_SIDES)
    impls = ((kernel,) if gpu else ()) + ("emulated",)
    try:
        out = check_models(act, impls, obs_dim, nvec, case.hidden)
    except Exception as e:  # noqa: BLE001
        out = {"check": "error: " + layer_bench.first_lines(e),
               "detail": traceback.format_exc()[-3000:]}
    errs = ", ".join(f"{k[:-len('_max_rel_err_vs_f32')]} {v:.1e}" for k, v in out.items()
                     if k.endswith("_max_rel_err_vs_f32"))
    vs = out.get(f"{kernel}_max_rel_err_vs_emulated")
    print(f"  check {'+'.join(impls)}: {out['check'][:300]}"
          + (f" (max rel err vs float32: {errs})" if errs else "")
          + ("" if vs is None else f"; {kernel} vs emulated {vs:.1e}"), flush=True)
    return out


def run_act(act: str, args: argparse.Namespace, gpu: bool, data: dict[str, Any]) -> None:
    """The check and every side for one activation; the result written after each."""
    case = CASES[args.case]
    config = load_config(case.config, overrides(args, act, "jax"))
    nvec, obs_dim, agents, groups = env_shapes(config)
    entry: dict[str, Any] = {"act": act, "nvec": list(nvec), "obs_dim": obs_dim,
                             "agents": agents, "sides": {}}
    if args.case != "mpe":  # (mpe's entries as before)
        entry.update(groups=groups, forward_kernel=forward_plan(obs_dim, sum(nvec), case.hidden))
    data["results"].append(entry)
    print(f"{act}: {args.num_envs} envs x {args.num_steps} steps x {agents} agents "
          f"({', '.join(f'{g} {n}' for g, n in groups.items())}), obs {obs_dim}, "
          f"logits {sum(nvec)}, hidden {case.hidden}-{case.hidden}", flush=True)
    if "forward_kernel" in entry:
        print(f"  {entry['forward_kernel']}", flush=True)
    entry["check"] = run_checks(act, gpu, obs_dim, nvec, case)
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
    ap.add_argument("--case", choices=tuple(CASES), default="mpe",
                    help="mpe: MPE PPO, 64-64, the kernel pair (default); tag_a2c: Tag A2C at "
                         "2000 envs x 50 steps, 256-256, the forward kernel")
    ap.add_argument("--quick", action="store_true",
                    help="sides mlp and the kernels', 3 repeats, no rollout split (mpe: 10 "
                         "updates a call)")
    ap.add_argument("--acts", default=None,
                    help="of tanh, relu (default: the case's, tanh for mpe, relu for tag_a2c)")
    ap.add_argument("--sides", default=None,
                    help="a subset of the case's: " + "; ".join(
                        f"{k}: {', '.join(c.sides)}" for k, c in CASES.items()))
    ap.add_argument("--num-envs", type=int, default=None,
                    help="default: mpe 1024 (GPU), 16 (CPU); tag_a2c 2000, 10")
    ap.add_argument("--num-steps", type=int, default=None,
                    help="default: mpe 32 (GPU), 8 (CPU); tag_a2c 50, 4")
    ap.add_argument("--updates", type=int, default=None, help="updates a timed call")
    ap.add_argument("--repeats", type=int, default=None,
                    help="timed calls (median); default 5 (mpe), 3 (tag_a2c)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-rollout-split", dest="rollout_split", action="store_false",
                    help="skip timing the rollouts alone")
    ap.add_argument("--traceback", action="store_true", help="print whole tracebacks")
    ap.add_argument("--out", default=None, help="default: " + "; ".join(
        f"{k}: {c.out}" for k, c in CASES.items()))
    return ap.parse_args()


def resolve(args: argparse.Namespace, gpu: bool) -> Case:
    """The case's defaults into `args` (sizes, updates, repeats, acts, sides, out)."""
    case = CASES[args.case]
    envs, steps, updates = case.gpu_size if gpu else case.cpu_size
    args.num_envs, args.num_steps = args.num_envs or envs, args.num_steps or steps
    args.updates = args.updates or (case.quick_updates if args.quick and gpu else updates)
    args.repeats = args.repeats or case.repeats
    if not gpu:
        args.repeats = 1  # the CPU's times say nothing here
    elif args.quick:
        args.repeats = min(args.repeats, 3)
    args.rollout_split = args.rollout_split and not args.quick
    args.acts, args.out = args.acts or case.act, args.out or case.out
    asked = (args.sides or ",".join(case.sides)).split(",")
    # in the case's order: mlp first, the others compared with it
    args.sides = [s for s in case.sides if s in asked and not (args.quick and s == "emulated")]
    return case


def main() -> int:
    args = parse_args()
    start = time.perf_counter()
    gpu = jax.default_backend() == "gpu"
    case = resolve(args, gpu)
    meta = run_meta(gpu=gpu, device_count=len(jax.devices()))
    print(f"{meta['device']}, jax {jax.__version__}, commit {meta['commit']}; case {args.case}; "
          f"sides {','.join(args.sides)}; {args.updates} updates a call", flush=True)
    data: dict[str, Any] = {"meta": meta, "config": {
        "case": args.case, "env_config": case.config, "group": ",".join(case.groups),
        "num_envs": args.num_envs, "num_steps": args.num_steps,
        "updates_per_call": args.updates, "repeats": args.repeats,
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
