"""Feed-forward actor-critics: the shipped ``mlp`` (`MLPActorCritic`, on the
GPU through the fused layers of `mlp_kernel`), the centralised critic
(`CentralCritic`) and the random baseline (`UniformPolicy`).

Every feed-forward model maps observations to action logits and a value:
``logits, value = model.apply(params, obs)`` with ``obs: f32[..., obs_dim]``,
``logits: f32[..., sum(nvec)]`` (one block of logits per action head, in
order) and ``value: f32[...]``. Any user-supplied `flax.linen.Module` with
that call signature can be passed to the trainer instead of a name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp.models import mlp_kernel, mlp_mosaic
from jaxwarp.models.layers import ACTIVATIONS, orthogonal


def _matmul(x: jax.Array, w: jax.Array) -> jax.Array:
    return jax.lax.dot_general(x, w, (((x.ndim - 1,), (0,)), ((), ())))


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _linear(x: jax.Array, kernel: jax.Array, bias: jax.Array, fold: bool,
            blocks: bool) -> jax.Array:
    """x @ kernel + bias in x's dtype; gradients: `_linear_bwd`."""
    return _linear_fwd(x, kernel, bias, fold, blocks)[0]


def _linear_fwd(x, kernel, bias, fold, blocks):
    w, b = kernel.astype(x.dtype), bias.astype(x.dtype)
    if fold:
        # The bias as one more kernel row against a column of ones: the
        # matmul writes the pre-activation itself (XLA:GPU adds a bias in a
        # separate pass over the [rows, width] output). Worth it where the
        # input is narrower than the output: the extra column is cheap.
        ones = jnp.ones(x.shape[:-1] + (1,), x.dtype)
        y = _matmul(jnp.concatenate([x, ones], -1), jnp.concatenate([w, b[None]], 0))
    else:
        y = _matmul(x, w) + b
    return y, (x, w)


@jax.named_scope("backward")
def _linear_bwd(fold, blocks, res, dy):
    x, w = res
    dx = jax.lax.dot_general(dy, w, (((dy.ndim - 1,), (1,)), ((), ())))
    dw = mlp_kernel.weight_grad(x, dy, blocks)  # over row blocks, float32
    lead = tuple(range(x.ndim - 1))
    db = jnp.sum(dy, axis=lead, dtype=jnp.float32)
    return dx, dw, db


_linear.defvjp(_linear_fwd, _linear_bwd)


class DenseParams(nn.Module):
    """The parameters of one ``nn.Dense`` layer (same names, shapes, float32,
    initialisers), returned instead of applied, so that layers reading the
    same input can run as one matmul (`fused_linear`)."""

    features: int
    kernel_init: Callable = nn.initializers.lecun_normal()

    @nn.compact
    def __call__(self, in_features: int) -> tuple[jax.Array, jax.Array]:
        return (self.param("kernel", self.kernel_init, (in_features, self.features),
                           jnp.float32),
                self.param("bias", nn.initializers.zeros, (self.features,), jnp.float32))


def fused_linear(x: jax.Array, layers: Sequence[tuple[jax.Array, jax.Array]],
                 dtype: Any, row_blocks: bool = True) -> list[jax.Array]:
    """``[x @ kernel + bias for kernel, bias in layers]`` as one matmul of x
    (f32 or bf16 [..., D]) with the layers' kernels side by side, in `dtype`.

    Gradients (`_linear_bwd`): the weight and bias gradients accumulate in
    float32, over blocks of rows that divide the batch (XLA:GPU would pad
    the rows to a multiple of its own split first: a copy of both
    operands); row_blocks=False turns that off (for a batch split over
    devices along a non-leading axis, as the trainer's). Where the input is
    narrower than the output the bias is folded into the matmul (no
    separate bias pass over the output).
    """
    kernel = jnp.concatenate([k for k, _ in layers], axis=1)
    bias = jnp.concatenate([b for _, b in layers])
    y = _linear(x.astype(dtype), kernel, bias, x.shape[-1] < kernel.shape[1], row_blocks)
    if len(layers) == 1:
        return [y]
    bounds = np.cumsum([0] + [b.shape[0] for _, b in layers])
    return [y[..., a:b] for a, b in zip(bounds[:-1], bounds[1:])]


class MLPActorCritic(nn.Module):
    """Actor and critic MLPs: separate (PureJaxRL/CleanRL layout) or one
    shared torso with a policy and a value head (WarpDrive's model; half the
    compute).

    Orthogonal initialisation; the policy head starts near uniform (gain
    0.01), the value head with gain 1. ``dtype=bfloat16`` runs the matmuls
    in bfloat16 with float32 parameters (their gradients accumulate in
    float32); logits and value return as float32. The parameters are those
    of ``nn.Dense`` layers named as nn.Dense names them (Dense_0.. for the
    actor torso, then the critic torso, the policy head, the value head);
    a shared torso's two heads run as one matmul (`fused_linear`).
    """

    action_dims: Sequence[int]  # nvec: choices per action head
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "tanh"
    shared_torso: bool = False
    dtype: Any = jnp.float32
    row_blocks: bool = True  # see fused_linear; the trainer sets False over several devices

    def _kernels(self, obs_dim: int) -> tuple[mlp_kernel.Layout | None, str]:
        """(the fused kernels' layout, or None, and why not) for obs_dim inputs."""
        widths = list(self.hidden_sizes)
        if not self.row_blocks:
            return None, "the envs are split over devices"
        if not widths:
            return None, "no hidden layers"
        out_cols = int(sum(self.action_dims)) + 1
        layout = mlp_kernel.layout_for(obs_dim, widths, out_cols, 1 if self.shared_torso else 2,
                                       self.activation, self.dtype, self.action_dims)
        if layout is not None:
            return layout, ""
        # (layout_for declines only for why_not_here's reasons, unless replaced)
        return None, (mlp_kernel.why_not_here(obs_dim, widths, out_cols, self.activation,
                                              self.dtype) or "mlp_kernel.layout_for declined")

    def layers(self, obs_dim: int) -> str:
        """Which layers run this model on obs_dim inputs: "fused kernels"
        (jaxwarp/models/mlp_kernel.py; "..., the rollout's forward on Mosaic
        GPU" where mlp_mosaic takes it) or "XLA's layers: <why>"."""
        layout, why = self._kernels(obs_dim)
        if layout is None:
            return f"XLA's layers: {why}"
        if mlp_mosaic.plan_for(layout) is not None:
            return "fused kernels, the rollout's forward on Mosaic GPU"
        return "fused kernels"

    def fuses_head_stats(self, obs_dim: int) -> bool:
        """Whether ``apply(params, obs, actions)`` is offered on obs_dim inputs:
        the fused kernels run this model and take the heads' statistics too."""
        layout, _ = self._kernels(obs_dim)
        return layout is not None and bool(layout.heads)

    @nn.compact
    def __call__(self, obs: jax.Array, actions: jax.Array | None = None
                 ) -> tuple[jax.Array, ...]:
        """(logits f32[..., sum(nvec)], value f32[...]) of obs [..., obs_dim];
        with actions i32[..., len(nvec)] (only where `fuses_head_stats`): the
        learner's (log_prob, entropy, value), each f32[...], with the heads'
        softmax taken in the forward kernel (`mlp_kernel.fused_head_stats`)."""
        act = ACTIVATIONS[self.activation]
        hidden = orthogonal(np.sqrt(2))
        widths = list(self.hidden_sizes)
        in_dims = [obs.shape[-1]] + widths[:-1]
        last = widths[-1] if widths else obs.shape[-1]
        names = iter(f"Dense_{i}" for i in range(2 * len(widths) + 2))
        towers = 1 if self.shared_torso else 2
        torsos = [[DenseParams(w, hidden, name=next(names))(d) for w, d in zip(widths, in_dims)]
                  for _ in range(towers)]
        policy = DenseParams(int(sum(self.action_dims)), orthogonal(0.01),
                             name=next(names))(last)
        value = DenseParams(1, orthogonal(1.0), name=next(names))(last)

        layout, _ = self._kernels(obs.shape[-1])
        if actions is not None and (layout is None or not layout.heads):
            raise ValueError("MLPActorCritic: actions are taken only where the fused kernels "
                             "run the heads (fuses_head_stats); apply(params, obs) otherwise")
        if layout is not None:
            # On the GPU: every layer of a tile of rows on chip (mlp_kernel).
            weights = mlp_kernel.pack(layout, torsos, policy, value)
            if actions is not None:  # (layout.heads: checked above)
                return mlp_kernel.fused_head_stats(layout, obs, weights, actions,
                                                   self.row_blocks)
            out = mlp_kernel.fused_mlp(layout, obs, weights, self.row_blocks)
            a = policy[0].shape[1]
            return out[..., :a], out[..., a]

        # Two towers' first layers could share one matmul of the observations,
        # but slicing its [rows, 2 x width] output in two costs XLA:GPU a copy
        # of both halves (measured: more than the matmul saves); the heads of
        # one torso share theirs (the value head alone is a 1-column matmul).
        xs = [obs] * towers
        for i in range(len(widths)):
            xs = [act(fused_linear(x, [t[i]], self.dtype, self.row_blocks)[0])
                  for x, t in zip(xs, torsos)]
        if towers == 1:
            logits, v = fused_linear(xs[0], [policy, value], self.dtype, self.row_blocks)
        else:
            logits = fused_linear(xs[0], [policy], self.dtype, self.row_blocks)[0]
            v = fused_linear(xs[1], [value], self.dtype, self.row_blocks)[0]
        return logits.astype(jnp.float32), jnp.squeeze(v, -1).astype(jnp.float32)


class CentralCritic(nn.Module):
    """A centralised critic (MAPPO): an MLP from the env's global state
    f32[..., S] to one value f32[...] per env, shared by its agents."""

    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "tanh"

    @nn.compact
    def __call__(self, state: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        x = state.astype(jnp.float32)
        for w in self.hidden_sizes:
            x = act(nn.Dense(w, kernel_init=orthogonal(np.sqrt(2)))(x))
        return jnp.squeeze(nn.Dense(1, kernel_init=orthogonal(1.0))(x), -1)


class UniformPolicy(nn.Module):
    """Uniformly random actions and a zero value: the random baseline.

    It has no parameters, so training it changes nothing.
    """

    action_dims: Sequence[int]

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        batch = obs.shape[:-1]
        return (jnp.zeros((*batch, int(sum(self.action_dims))), jnp.float32),
                jnp.zeros(batch, jnp.float32))
