"""Writes into the run folder that fail because the folder is full, read-only
or not ours to write: `writing` turns them into one-line `StorageError`s that
name the file and what to do next."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from jaxwarp.errors import StorageError, storage_fault


@contextlib.contextmanager
def writing(out: Path, what: str) -> Iterator[None]:
    """Turns a failed write of `what` (in out) into a one-line StorageError
    when the folder is full, read-only or not ours to write (`storage_fault`,
    also where Orbax or TensorStore wrap the OSError); other errors pass."""
    try:
        yield
    except StorageError:
        raise
    except Exception as e:
        fault = storage_fault(e)
        if fault is None:
            raise
        if fault in ("no space left on device", "disk quota exceeded"):
            hint = (f"the checkpoints already written are kept; free space, then continue "
                    f"with: jaxwarp train --resume {out}")
        else:
            hint = "choose another --out (or copy the folder somewhere writable to resume it)"
        raise StorageError(f"cannot write {what} in {out}: {fault}; {hint}") from None
