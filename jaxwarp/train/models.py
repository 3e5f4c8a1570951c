"""Actor-critic models (Flax linen) and the model registry.

Every model maps observations to action logits and a value:
``logits, value = model.apply(params, obs)`` with ``obs: f32[..., obs_dim]``,
``logits: f32[..., sum(nvec)]`` (one block of logits per action head, in
order) and ``value: f32[...]``. Any user-supplied `flax.linen.Module` with
that call signature can be passed to the trainer instead of a name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp.train.config import ConfigError, PolicyConfig

_ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu, "elu": nn.elu,
}


class MLPActorCritic(nn.Module):
    """Actor and critic MLPs: separate (PureJaxRL/CleanRL layout) or one
    shared torso with a policy and a value head (WarpDrive's model; half the
    compute).

    Orthogonal initialisation; the policy head starts near uniform (gain
    0.01), the value head with gain 1. ``dtype=bfloat16`` runs the matmuls
    in bfloat16 with float32 parameters; logits and value return as float32.
    """

    action_dims: Sequence[int]  # nvec: choices per action head
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "tanh"
    shared_torso: bool = False
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        act = _ACTIVATIONS[self.activation]
        hidden_init = nn.initializers.orthogonal(np.sqrt(2))

        def torso(x):
            for width in self.hidden_sizes:
                x = act(nn.Dense(width, kernel_init=hidden_init, dtype=self.dtype)(x))
            return x

        a = torso(obs)
        v = a if self.shared_torso else torso(obs)
        logits = nn.Dense(int(sum(self.action_dims)), dtype=self.dtype,
                          kernel_init=nn.initializers.orthogonal(0.01))(a)
        value = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0), dtype=self.dtype)(v)
        return logits.astype(jnp.float32), jnp.squeeze(value, -1).astype(jnp.float32)


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
    "uniform": lambda nvec, p: UniformPolicy(tuple(int(n) for n in nvec)),
}


def register_model(name: str, factory: ModelFactory) -> None:
    """Makes `factory(nvec, policy_config) -> nn.Module` available as ``model: name``."""
    MODELS[name] = factory


def make_model(name: str, nvec: Sequence[int], policy: PolicyConfig, group: str) -> nn.Module:
    """The Flax module that the config names for policy group `group`."""
    if name not in MODELS:
        raise ConfigError(f"policies.{group}.model: {name!r} is unknown; expected one of "
                          f"{sorted(MODELS)} (or pass a flax module via models=...)")
    return MODELS[name](nvec, policy)
