"""jaxwarp.pycuda_bridge: PyCUDA zero-copy views of live JAX arrays and a
contract env's own kernels launched from Python (WarpDrive's model), checked
bit for bit against the FFI path. The GPU tests need PyCUDA and a GPU."""

import struct
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxwarp


def test_core_package_never_imports_pycuda():
    code = ("import sys, jaxwarp, jaxwarp.train, jaxwarp.authoring; "
            "print('pycuda' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_bridge_without_pycuda_or_gpu_gives_clear_errors():
    from jaxwarp import pycuda_bridge

    try:
        import pycuda  # noqa: F401
        have = True
    except ImportError:
        have = False
    if not have:
        with pytest.raises(ImportError, match=r"pip install 'jaxwarp\[pycuda\]'"):
            pycuda_bridge.primary_context()
    with pytest.raises(TypeError, match="expected a jax.Array on a GPU"):
        pycuda_bridge.device_pointer(np.zeros(3))
    if not jaxwarp.gpu_available():
        with pytest.raises(TypeError, match="on cpu"):
            pycuda_bridge.device_pointer(jnp.zeros(3))
    env = jaxwarp.make("cartpole", backend="jax")
    with pytest.raises(ValueError, match="backend='cuda'"):
        pycuda_bridge.PyCudaEnv(env)


_OFFSETS_CC = r"""
#include <stddef.h>
#include <stdio.h>
#include "jaxwarp_kernels.h"
// The kernels' parameters (Call, Layout by value) sit where a struct of the
// two would put its members: each at a multiple of its alignment.
struct Args { jaxwarp::Call c; jaxwarp::Layout l; };
int main() {
#define F(m) printf("call.%s %zu\n", #m, offsetof(jaxwarp::Call, m));
  F(envs) F(per_member) F(keys) F(n) F(obs_dim) F(heads) F(autoreset) F(obs_bf16) F(actions) F(obs) F(reward)
  F(done) F(term) F(trunc) F(base) F(per_env) F(stride) F(offset) F(params) F(params_stride)
  printf("call.size %zu\ncall.align %zu\nmax_fields %d\n", sizeof(jaxwarp::Call),
         alignof(jaxwarp::Call), jaxwarp::kMaxFields);
#define L(m) printf("layout.%s %zu\n", #m, offsetof(jaxwarp::Layout, m));
  L(tpe) L(epb) L(staged) L(obs_staged) L(words) L(scratch_words) L(smem_bytes)
  printf("layout.size %zu\n", sizeof(jaxwarp::Layout));
  printf("args %zu %zu\n", offsetof(Args, l), offsetof(Args, l) + sizeof(jaxwarp::Layout));
}
"""


def test_kernel_argument_structs_match_the_cpp_layout(tmp_path):
    """CALL_DTYPE / LAYOUT_DTYPE against offsetof in cuda/jaxwarp_kernels.h (g++),
    and the two arguments packed as PyCUDA packs np.void ("<n>s", no alignment)
    against where the C ABI puts them. No PyCUDA or GPU needed."""
    from jaxwarp import authoring
    from jaxwarp import pycuda_bridge as pb
    from jaxwarp.authoring import build

    try:
        cxx = build.find_cxx()
    except authoring.EnvBuildError as e:
        pytest.skip(str(e))
    (tmp_path / "offsets.cc").write_text(_OFFSETS_CC)
    subprocess.run([cxx, "-std=c++17", "-I", str(authoring.API_DIR), "offsets.cc", "-o",
                    "offsets"], cwd=tmp_path, check=True, capture_output=True)
    out = subprocess.run([str(tmp_path / "offsets")], capture_output=True, text=True,
                         check=True).stdout
    cpp = {line.split()[0]: [int(v) for v in line.split()[1:]] for line in out.splitlines()}

    assert cpp["max_fields"] == [pb.MAX_FIELDS]
    assert cpp["call.size"] == [pb.CALL_DTYPE.itemsize] == [1392]
    assert cpp["call.align"] == [pb.CALL_DTYPE.alignment]
    assert cpp["layout.size"] == [pb.LAYOUT_DTYPE.itemsize] == [28]
    for prefix, dtype in (("call.", pb.CALL_DTYPE), ("layout.", pb.LAYOUT_DTYPE)):
        for name, (_, offset) in dtype.fields.items():
            assert cpp[prefix + name] == [offset], name
    assert pb.CALL_DTYPE.fields["base"][0].shape == (pb.MAX_FIELDS,)

    layout = pb.layout_arg(build._Layout(*range(1, 8)))
    assert isinstance(layout, np.void) and layout.tolist() == tuple(range(1, 8))
    call = np.zeros((), pb.CALL_DTYPE)[()]
    fmt = [f"{a.itemsize}s" for a in (call, layout)]
    assert cpp["args"] == [struct.calcsize(fmt[0]), struct.calcsize("".join(fmt))]


def _gpu_pycuda():
    if not jaxwarp.gpu_available():
        pytest.skip("needs a GPU")
    pytest.importorskip("pycuda.driver")
    from jaxwarp import pycuda_bridge
    return pycuda_bridge


@pytest.mark.gpu
def test_as_gpuarray_is_a_zero_copy_view():
    pb = _gpu_pycuda()
    x = jnp.arange(12, dtype=jnp.float32).reshape(3, 4) * 2
    g = pb.as_gpuarray(x)
    assert g.shape == (3, 4) and g.dtype == np.float32
    assert int(g.gpudata) == x.__cuda_array_interface__["data"][0]
    np.testing.assert_array_equal(g.get(), np.asarray(x))


@pytest.mark.gpu
@pytest.mark.parametrize("name,kw,num_envs", [
    ("tag_gridworld", dict(num_taggers=3, grid_length=4, episode_length=7, random_start=True), 37),
    ("mpe_simple_tag", {}, 50),
    ("cartpole", {}, 300),
])
def test_pycuda_launches_match_the_ffi_path_bitwise(name, kw, num_envs):
    pb = _gpu_pycuda()
    env = jaxwarp.make(name, backend="cuda", **kw)
    pc = pb.PyCudaEnv(env)
    key = jax.random.PRNGKey(5)
    pc.reset(key, num_envs)
    obs, state = jax.jit(env.reset, static_argnums=1)(key, num_envs)
    np.testing.assert_array_equal(pc.numpy(pc.obs), np.asarray(obs))
    step = jax.jit(env.step)
    for t in range(20):
        k1, k2 = jax.random.split(jax.random.fold_in(key, t))
        actions = env.action_space.sample(k1, (num_envs, env.num_agents))
        pc.step(k2, actions)
        obs, state, reward, done, _ = step(k2, state, actions)
        for f in env.spec.fields:
            np.testing.assert_array_equal(pc.numpy(getattr(pc.state, f.name)),
                                          np.asarray(getattr(state, f.name)), err_msg=f.name)
        np.testing.assert_array_equal(pc.numpy(pc.obs), np.asarray(obs))
        np.testing.assert_array_equal(pc.numpy(pc.reward), np.asarray(reward))
        np.testing.assert_array_equal(pc.numpy(pc.done), np.asarray(done))
    with pytest.raises(ValueError, match="actions: expected int32"):
        pc.step(key, actions.astype(jnp.float32))
