import atexit
import os
import shutil
import signal
import tempfile

# One persistent compilation cache for the whole run, shared with the
# subprocesses the tests start (they inherit the variable): many tests compile
# the same small training programs (a run, its resume, its evaluation), and
# XLA's compile is most of their time. A fresh folder, so no run reads another
# run's programs; a folder the caller names is kept. Set before jax is imported,
# which reads it once.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="jaxwarp-tests-xla-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, True)

import jax
import pytest

import jaxwarp

# Also where a plugin imported jax before this file ran (the cache starts at the
# first compile).
jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])

# A suite started in the background by a non-interactive shell inherits SIGINT
# ignored (POSIX job control), and so would every jaxwarp it starts: the Ctrl-C
# tests need it delivered, as it is from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config, items):
    if jaxwarp.gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU and jaxwarp's CUDA library")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def cpu_device():
    return jax.devices("cpu")[0]


# Backends as fixtures, so that one test covers the kernels on the CPU here and
# on the GPU where there is one: the CUDA cases are marked `gpu` (skipped
# without a GPU; `pytest -m gpu` selects them, experiments/tools/gpu_tests.sh).
@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def kernel_backend(request) -> str:
    """A kernel backend: "cpu" (XLA:CPU), and "cuda" (marked gpu)."""
    return request.param


@pytest.fixture(params=[("cpu", "jax"), pytest.param(("cuda", "jax"), marks=pytest.mark.gpu),
                        pytest.param(("cuda", "cpu"), marks=pytest.mark.gpu)],
                ids=["cpu-jax", "cuda-jax", "cuda-cpu"])
def kernel_pair(request) -> tuple[str, str]:
    """Two backends whose rollouts must agree: a kernel against the pure-JAX
    reference ("cpu", "jax"; "cuda", "jax"), and the two kernels ("cuda", "cpu")."""
    return request.param

