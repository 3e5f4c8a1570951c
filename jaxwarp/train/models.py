"""Actor-critic models (Flax linen) and the model registry.

Every model maps observations to action logits and a value:
``logits, value = model.apply(params, obs)`` with ``obs: f32[..., obs_dim]``,
``logits: f32[..., sum(nvec)]`` (one block of logits per action head, in
order) and ``value: f32[...]``. Any user-supplied `flax.linen.Module` with
that call signature can be passed to the trainer instead of a name.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp.train import mlp_kernel
from jaxwarp.train.config import ConfigError, PolicyConfig

_ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu, "elu": nn.elu,
}


def orthogonal(scale: float) -> Callable[..., jax.Array]:
    """Flax's orthogonal initializer (the same values), whose QR runs one
    matrix at a time under `jax.vmap` (a `lax.map` over the batch).

    Batched over seeds, the QR would be one batched LAPACK call that splits
    its batch over XLA:CPU's intra-op thread pool and waits for it; two such
    calls running at once (two layers or groups initialised concurrently) on
    a pool of two threads wait for each other forever (seen on a 2-core CPU:
    ``jax.jit(jax.vmap(make_train(config)))`` hanging in ``lapack_sgeqrf``).
    """
    base = nn.initializers.orthogonal(scale)

    def init(key: jax.Array, shape: Sequence[int], dtype: Any = jnp.float32) -> jax.Array:
        @jax.custom_batching.custom_vmap
        def one(k):
            return base(k, shape, dtype)

        @one.def_vmap
        def _batched(axis_size, in_batched, k):
            return jax.lax.map(one, k), True

        return one(key)

    return init


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
                                       self.activation, self.dtype)
        if layout is not None:
            return layout, ""
        # (layout_for declines only for why_not_here's reasons, unless replaced)
        return None, (mlp_kernel.why_not_here(obs_dim, widths, out_cols, self.activation,
                                              self.dtype) or "mlp_kernel.layout_for declined")

    def layers(self, obs_dim: int) -> str:
        """Which layers run this model on obs_dim inputs: "fused kernels"
        (jaxwarp/train/mlp_kernel.py) or "XLA's layers: <why>"."""
        layout, why = self._kernels(obs_dim)
        return "fused kernels" if layout is not None else f"XLA's layers: {why}"

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        act = _ACTIVATIONS[self.activation]
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
        if layout is not None:
            # On the GPU: every layer of a tile of rows on chip (mlp_kernel).
            weights = mlp_kernel.pack(layout, torsos, policy, value)
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


def _gru_torso(carry: jax.Array, x: jax.Array, reset: jax.Array, hidden_sizes: Sequence[int],
               rnn_size: int, act: Callable[[jax.Array], jax.Array]
               ) -> tuple[jax.Array, jax.Array]:
    """Inside a recurrent module's compact call: the carry reset where `reset`,
    an MLP embedding of x (`hidden_sizes`) and a GRU cell of `rnn_size` units.
    Returns (carry, GRU output). The layers are created in the calling module
    (named Dense_0.., GRUCell_0 there, as if written inline)."""
    carry = jnp.where(reset[..., None], jnp.zeros_like(carry), carry)
    x = x.astype(jnp.float32)
    for w in hidden_sizes:
        x = act(nn.Dense(w, kernel_init=orthogonal(np.sqrt(2)))(x))
    # Flax's default recurrent initialiser (orthogonal) through `orthogonal`: the
    # same values, one QR per matrix under vmap over seeds (see `orthogonal`).
    return nn.GRUCell(rnn_size, recurrent_kernel_init=orthogonal(1.0))(carry, x)


class GRUActorCritic(nn.Module):
    """A recurrent actor-critic (JaxMARL's IPPO-RNN layout): an MLP embedding
    of the observation (``hidden_sizes``), a GRU cell (Flax's `nn.GRUCell`,
    ``rnn_size`` units), then a policy head and a value head, each one hidden
    layer of ``rnn_size`` units.

    The recurrent model contract (docs/models.md): ``initialize_carry(batch_shape)``
    gives the carry of a fresh episode (here f32[*batch_shape, rnn_size] zeros),
    and ``carry, (logits, value) = model.apply(params, carry, obs, reset)``
    advances one step, where obs is f32[..., obs_dim] and reset bool[...] marks
    the entries whose episode begins with this obs (their carry is replaced by
    a fresh one first).
    """

    action_dims: Sequence[int]
    hidden_sizes: Sequence[int] = (128,)
    rnn_size: int = 128
    activation: str = "relu"

    def initialize_carry(self, batch_shape: Sequence[int]) -> jax.Array:
        return jnp.zeros((*batch_shape, self.rnn_size), jnp.float32)

    @nn.compact
    def __call__(self, carry: jax.Array, obs: jax.Array, reset: jax.Array
                 ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        act = _ACTIVATIONS[self.activation]
        carry, x = _gru_torso(carry, obs, reset, self.hidden_sizes, self.rnn_size, act)
        pi = act(nn.Dense(self.rnn_size, kernel_init=orthogonal(np.sqrt(2)))(x))
        logits = nn.Dense(int(sum(self.action_dims)), kernel_init=orthogonal(0.01))(pi)
        v = act(nn.Dense(self.rnn_size, kernel_init=orthogonal(np.sqrt(2)))(x))
        value = nn.Dense(1, kernel_init=orthogonal(1.0))(v)
        return carry, (logits, jnp.squeeze(value, -1))


class CentralCritic(nn.Module):
    """A centralised critic (MAPPO): an MLP from the env's global state
    f32[..., S] to one value f32[...] per env, shared by its agents."""

    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "tanh"

    @nn.compact
    def __call__(self, state: jax.Array) -> jax.Array:
        act = _ACTIVATIONS[self.activation]
        x = state.astype(jnp.float32)
        for w in self.hidden_sizes:
            x = act(nn.Dense(w, kernel_init=orthogonal(np.sqrt(2)))(x))
        return jnp.squeeze(nn.Dense(1, kernel_init=orthogonal(1.0))(x), -1)


class CentralGRUCritic(nn.Module):
    """A recurrent centralised critic (JaxMARL's MAPPO-RNN critic): an MLP
    embedding of the env's global state (``hidden_sizes``), a GRU cell
    (``rnn_size``), one hidden layer of ``rnn_size`` units and the value. It
    keeps the recurrent contract with one carry per env:
    ``carry, value = critic.apply(params, carry, state, reset)``, carry
    f32[..., rnn_size], state f32[..., S], reset bool[...] -> value f32[...]."""

    hidden_sizes: Sequence[int] = (128,)
    rnn_size: int = 128
    activation: str = "relu"

    def initialize_carry(self, batch_shape: Sequence[int]) -> jax.Array:
        return jnp.zeros((*batch_shape, self.rnn_size), jnp.float32)

    @nn.compact
    def __call__(self, carry: jax.Array, state: jax.Array, reset: jax.Array
                 ) -> tuple[jax.Array, jax.Array]:
        act = _ACTIVATIONS[self.activation]
        carry, x = _gru_torso(carry, state, reset, self.hidden_sizes, self.rnn_size, act)
        v = act(nn.Dense(self.rnn_size, kernel_init=orthogonal(np.sqrt(2)))(x))
        return carry, jnp.squeeze(nn.Dense(1, kernel_init=orthogonal(1.0))(v), -1)


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


ModelFactory = Callable[[Sequence[int], PolicyConfig], nn.Module]

MODELS: dict[str, ModelFactory] = {
    "mlp": lambda nvec, p: MLPActorCritic(tuple(int(n) for n in nvec), tuple(p.hidden_sizes),
                                          p.activation, p.shared_torso, jnp.dtype(p.dtype)),
    "gru": lambda nvec, p: GRUActorCritic(tuple(int(n) for n in nvec), tuple(p.hidden_sizes),
                                          p.rnn_size, p.activation),
    "uniform": lambda nvec, p: UniformPolicy(tuple(int(n) for n in nvec)),
}


def register_model(name: str, factory: ModelFactory) -> None:
    """Makes `factory(nvec, policy_config) -> nn.Module` available as ``model: name``."""
    MODELS[name] = factory


# Installed packages' models: the entry point group (jaxwarp/plugins.py tells the recipe).
MODEL_GROUP = "jaxwarp.models"


def load_model_plugins() -> None:
    """Registers every installed ``jaxwarp.models`` entry point: a factory,
    under the entry point's name, or a module that calls `register_model`."""
    from jaxwarp.registry import PluginError, entry_point_objects

    for name, obj, where in entry_point_objects(MODEL_GROUP):
        if isinstance(obj, types.ModuleType):
            continue  # it called register_model when imported
        if not callable(obj):
            raise PluginError(f"{where}: expected a model factory (nvec, policy_config) -> "
                              f"flax module; got {type(obj).__name__}")
        register_model(name, obj)


def make_model(name: str, nvec: Sequence[int], policy: PolicyConfig, group: str) -> nn.Module:
    """The Flax module that the config names for policy group `group`."""
    if name not in MODELS:
        raise ConfigError(f"policies.{group}.model: {name!r} is unknown; expected one of "
                          f"{sorted(MODELS)}. A model of your own is named once registered "
                          "(register_model) by a module imported with env_module=PATH.py, or "
                          "by an entry point of the group 'jaxwarp.models'; from Python, pass "
                          "the flax module via models=... (docs/models.md)")
    return MODELS[name](nvec, policy)
