"""The processes of a multi-process run at its start: ``jax.distributed`` as the
config asks (`init_distributed`), and the meeting before training where one
that failed tells the others to stop instead of waiting (`Handshake`)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from jaxwarp.errors import RunError
from jaxwarp.run import distributed
from jaxwarp.run.checkpoint import saved_distributed
from jaxwarp.train.config import TrainConfig


def init_distributed(out: Path, config: TrainConfig | None) -> distributed.ProcessInfo:
    """`distributed.maybe_initialize` as the config (or the saved one) asks."""
    try:
        return distributed.maybe_initialize(
            config.distributed if config is not None else saved_distributed(out))
    except RuntimeError as e:  # one line for the CLI, naming the variables to set
        raise RunError(str(e)) from None


class Handshake:
    """Before training, the processes of a multi-process run wait for each
    other in `distributed.all_ok`; one that fails before it is ready tells
    the others (`fail`), so that they stop instead of waiting."""

    def __init__(self, many: bool):
        self.many = many
        self.ready = False  # this process got past its checks

    def fail(self) -> None:
        if self.many and not self.ready:
            with contextlib.suppress(Exception):
                distributed.all_ok(False)

    def all_ready(self) -> bool:
        self.ready = True
        return distributed.all_ok(True)
