import signal

import jax
import pytest

import jaxwarp

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

