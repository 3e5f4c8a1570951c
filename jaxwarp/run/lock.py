"""The run folder held by one run at a time: `take_folder` creates it and takes
its exclusive lock (`RunLock` on out_dir/.lock; `NoLock` on processes other
than 0, whose run process 0's lock covers)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from jaxwarp.errors import RunError, RunLockedError, StorageError, storage_fault
from jaxwarp.run.handshake import Handshake
from jaxwarp.storage import open_own, writing

LOCK_FILE = ".lock"


def take_folder(out: Path, primary: bool, handshake: Handshake) -> RunLock | NoLock:
    """Creates out and takes its lock (process 0; the others take none); on
    failure tells the other processes first (`handshake.fail`)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        handshake.fail()
        fault = storage_fault(e)
        raise (StorageError if fault else RunError)(
            f"cannot create the output folder {out}: {fault or e}") from None
    try:
        with writing(out, LOCK_FILE):
            return RunLock(out) if primary else NoLock()
    except BaseException:
        handshake.fail()
        raise


class NoLock:
    """Processes other than 0 hold no lock (process 0's covers the run)."""

    def release(self) -> None:
        pass


class RunLock:
    """Exclusive `flock` on out_dir/.lock: held for the run, released on exit and
    by the kernel when the process dies (a killed run leaves no stale lock).

    A run that ends removes the file (a killed one leaves it, unlocked, and
    the next run takes it). The file is unlinked while still locked, so a
    process that opened it just before may lock the unlinked file: it checks
    after locking that the path still names the file it holds, else tries
    again. A .lock that is a symbolic link, a hard link or not a regular file
    is refused in one line (`open_own`), not written through."""

    def __init__(self, out: Path):
        import fcntl

        self.path = out / LOCK_FILE
        while True:
            # Never through a link: a .lock planted as a link to another file
            # would get that file truncated and a process id written into it.
            self.fd: int | None = open_own(self.path, os.O_RDWR)
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = os.read(self.fd, 32).decode(errors="replace").strip()
                os.close(self.fd)
                self.fd = None
                who = f"process {holder}" if holder.isdigit() else "another process"
                raise RunLockedError(f"{out} is in use by a jaxwarp run ({who}); wait for it "
                                     "to end or choose another --out") from None
            try:
                same = os.stat(self.path).st_ino == os.fstat(self.fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(self.fd)  # locked a file its holder had just removed: again
        os.ftruncate(self.fd, 0)
        os.write(self.fd, f"{os.getpid()}\n".encode())

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):  # still locked here: no one else's file
                os.unlink(self.path)
            os.close(self.fd)  # closing the only descriptor drops the flock
            self.fd = None
