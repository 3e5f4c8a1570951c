"""Environment variables set for one block, restored after (the experiments
build kernel variants this way: JAXWARP_NVCC_FLAGS, JAXWARP_TAG_GRID_MIN_AGENTS
are read when an env is made)."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator


@contextlib.contextmanager
def env_vars(**values: str | None) -> Iterator[None]:
    """Sets each NAME=value (None: leaves NAME as it is) inside the block,
    then restores what was there (unset where it was unset)."""
    saved = {k: os.environ.get(k) for k, v in values.items() if v is not None}
    try:
        for k in saved:
            os.environ[k] = values[k]
        yield
    finally:
        for k, old in saved.items():
            if old is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = old
