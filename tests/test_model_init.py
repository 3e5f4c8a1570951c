"""The models' orthogonal initialisation under vmap over seeds: flax's values,
one QR per matrix (a batched LAPACK QR can deadlock XLA:CPU's thread pool)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxwarp.benchmark import _sub_jaxprs
from jaxwarp.models import orthogonal
from jaxwarp.train import build_trainer, load_config


@pytest.mark.parametrize("shape", [(7, 16), (16, 5), (16, 1)])
def test_orthogonal_equals_flax_batched_and_alone(shape):
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    ours = jax.jit(jax.vmap(lambda k: orthogonal(1.4)(k, shape)))(keys)
    flax = jax.jit(jax.vmap(lambda k: nn.initializers.orthogonal(1.4)(k, shape)))(keys)
    np.testing.assert_array_equal(ours, flax)
    np.testing.assert_array_equal(ours[1], orthogonal(1.4)(keys[1], shape))
    assert ours.shape == (3, *shape) and ours.dtype == jnp.float32


def _qr_operands(jaxpr) -> list[tuple[int, ...]]:
    out = []
    for eqn in jaxpr.eqns:
        if "qr" in eqn.primitive.name or "geqrf" in eqn.primitive.name:
            out.extend(v.aval.shape for v in eqn.invars)
        for value in eqn.params.values():
            for sub in _sub_jaxprs(value):
                out.extend(_qr_operands(sub))
    return out


def test_seeds_initialise_one_matrix_per_qr():
    trainer = build_trainer(load_config("tag_duel_cpu", ["backend=jax", "devices=1"]))
    keys = jnp.stack([jax.random.PRNGKey(i) for i in range(2)])
    shapes = _qr_operands(jax.make_jaxpr(jax.vmap(trainer.init))(keys).jaxpr)
    assert shapes and all(len(s) == 2 for s in shapes), shapes
