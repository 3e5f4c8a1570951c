"""MPE simple_spread and simple_tag on the GPU (skipped without one): the CUDA kernel
against the CPU kernel and the pure-JAX reference, step by step."""

from __future__ import annotations

import pytest

import jaxwarp

pytestmark = pytest.mark.gpu



@pytest.mark.parametrize("other", ["cpu", "jax"])
@pytest.mark.parametrize("params", [{}, {"num_agents": 6, "num_landmarks": 6}])
def test_spread_cuda_matches(other, params):
    # CUDA's expf/log1pf differ from glibc's and XLA's by an ulp or so.
    r = jaxwarp.testing.check_consistency("mpe_simple_spread", ("cuda", other), num_envs=64,
                                          resync=True, rtol=1e-5, atol=1e-5, **params)
    assert r.ok, r
    assert r.episodes_finished == 128




@pytest.mark.parametrize("other", ["cpu", "jax"])
def test_tag_cuda_matches(other):
    r = jaxwarp.testing.check_consistency("mpe_simple_tag", ("cuda", other), num_envs=64,
                                          resync=True, rtol=1e-5, atol=1e-5)
    assert r.ok, r
    assert r.episodes_finished == 128
