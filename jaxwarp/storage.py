"""Files written whole (a run folder's, a GIF): never through a link, never
half-made, and one line when they fail.

`replacing` / `atomic_write` write a new file beside the old one and rename
it over the name, so that a reader (or a run killed meanwhile) sees the old
file or the new one, never a part, and a symbolic link planted at the name is
replaced, never written through (it could point at any file of the user's).
`open_own` opens a file to append to or lock without following a link.
`writing` turns a write that fails because the folder is full, read-only or
not ours to write into a one-line `StorageError` that names the file and what
to do next."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from jaxwarp.errors import RunError, StorageError, storage_fault


def _umask() -> int:
    """The process's umask (read from /proc where it can be, which changes nothing)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def replacing(path: str | Path) -> Iterator[BinaryIO]:
    """A new file for `path`, written through the binary file yielded and
    renamed over `path` when the block ends without an error (removed if it
    raises). The new file is created exclusively in the same folder (no name
    to plant a link at) with the permissions a plain open would give it."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write(path: str | Path, data: str | bytes) -> None:
    """`data` (text as UTF-8) as the whole of `path`, through `replacing`."""
    with replacing(path) as f:
        f.write(data.encode() if isinstance(data, str) else data)


def read_at_most(path: str | Path, limit: int) -> bytes:
    """The first limit + 1 bytes of `path` at most: more than `limit` of them
    says it is too big. Never the whole of a file whose size a stat does not
    tell (/dev/zero, a pipe, /proc: st_size 0) or of a huge one."""
    with open(path, "rb") as f:
        return f.read(limit + 1)


def open_own(path: str | Path, flags: int) -> int:
    """os.open(path, flags | O_CREAT) of a plain file that is the run's own: a
    RunError, naming it, for a symbolic link (not followed), a hard link to
    another name or anything but a regular file. Returns the descriptor."""
    try:  # (O_NONBLOCK: a FIFO at the name does not hang the open; no effect on a file)
        fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                     0o666)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise RunError(f"{path} is a symbolic link; jaxwarp writes no run file through "
                           "a link: remove it") from None
        if e.errno == errno.ENXIO:  # a FIFO or socket with no reader
            raise _not_own(path, "is not a regular file") from None
        raise
    st = os.fstat(fd)
    # (st_nlink 0: removed since it was opened, as a released lock is: no harm)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        os.close(fd)
        raise _not_own(path, "has other hard links" if stat.S_ISREG(st.st_mode)
                       else "is not a regular file")
    return fd


def _not_own(path: str | Path, kind: str) -> RunError:
    return RunError(f"{path} {kind}; jaxwarp writes no run file that is not its own: "
                    "remove it")


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
        if fault in ("no space left on device", "disk quota exceeded", "file too large"):
            hint = (f"the checkpoints already written are kept; free space, then continue "
                    f"with: jaxwarp train --resume {out}")
        else:
            hint = "choose another --out (or copy the folder somewhere writable to resume it)"
        raise StorageError(f"cannot write {what} in {out}: {fault}; {hint}") from None
