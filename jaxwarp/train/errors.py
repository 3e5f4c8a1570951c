"""Errors and warnings of a training run (`runner.train_run`, `checkpoint`).

Every message is one line: ``jaxwarp train`` prints it as
``jaxwarp train: error: <message>`` and exits 2.
"""

from __future__ import annotations


class RunError(RuntimeError):
    """A run that cannot start or go on; the message is one line (the CLI prints it)."""


class RunLockedError(RunError):
    """Another process holds the run folder's lock."""


class CheckpointError(RunError):
    """No intact checkpoint to resume from."""


class NonFiniteError(RunError):
    """A loss or a parameter became NaN/inf during training."""


class CheckpointWarning(UserWarning):
    """A corrupt checkpoint was skipped on resume."""
