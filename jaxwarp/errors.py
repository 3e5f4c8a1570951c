"""The errors and warnings jaxwarp's trainer raises: a bad configuration
(`ConfigError`) and a run that cannot start or go on (`RunError` and its kinds;
`jaxwarp.run.loop.train_run`, `jaxwarp.run.checkpoint`).

Every message is one line: ``jaxwarp train`` prints it as
``jaxwarp train: error: <message>`` and exits 2.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """An unknown key or an invalid value in a training configuration."""


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


class StorageError(RunError):
    """The run folder cannot be written: out of space, read-only, no permission."""


# errno -> how the message says it; the faults of a folder that the run cannot write to.
_STORAGE_ERRNOS = {28: "no space left on device", 122: "disk quota exceeded",
                   27: "file too large",
                   30: "read-only file system", 13: "permission denied",
                   1: "operation not permitted"}
# The same as Orbax/TensorStore report them, as text inside their own exception types.
_STORAGE_TEXTS = {"no space left on device": 28, "disk quota exceeded": 122,
                  "file too large": 27,
                  "read-only file system": 30, "permission denied": 13}


def storage_fault(e: BaseException | None) -> str | None:
    """What keeps the run from writing, when `e` (or an exception it was
    raised from, however wrapped) is one of those faults: "no space left on
    device", "read-only file system", ...; None for any other error."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _STORAGE_ERRNOS:
            return _STORAGE_ERRNOS[e.errno]
        text = str(e).lower()
        for words in _STORAGE_TEXTS:
            if words in text:
                return words
        e = e.__cause__ or e.__context__
    return None
