"""The GRU scan variants that `experiments/tools/peer_profile.py` patches in
(`experiments/gru_scan_variants.py`): each is the shipped `gru_scan`'s function,
values and gradients, vmapped over runs as the benchmarks run them, so a
variant's time is a time for the same maths."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxwarp.models import recurrent

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
import gru_scan_variants  # noqa: E402


def _args(runs=2, t=6, b=3, h=4):
    k = jax.random.split(jax.random.PRNGKey(0), 5)
    return (jax.random.normal(k[0], (runs, t, b, 3 * h)),
            0.5 * jax.random.normal(k[1], (runs, h, 3 * h)), jax.random.normal(k[2], (runs, h)),
            jax.random.normal(k[3], (runs, b, h)), jax.random.bernoulli(k[4], 0.3, (runs, t, b)))


def _values_and_grads(scan):
    def loss(xs, w, b, h0, reset):
        h_t, ys = scan(xs, w, b, h0, reset)
        return jnp.sum(h_t ** 2) + jnp.sum(jnp.sin(ys))
    return jax.jit(jax.vmap(jax.value_and_grad(loss, argnums=(0, 1, 2, 3))))


@pytest.mark.parametrize("marker", sorted(gru_scan_variants.VARIANTS))
def test_each_variant_is_the_shipped_scan(marker):
    args = _args()
    want = _values_and_grads(recurrent.gru_scan)(*args)
    got = _values_and_grads(gru_scan_variants.VARIANTS[marker])(*args)
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    # the patch is undone: the shipped loop is back after a variant ran
    assert recurrent.scan_batch_first is gru_scan_variants._SHIPPED_LOOP
