import jax
import pytest

import jaxwarp


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
