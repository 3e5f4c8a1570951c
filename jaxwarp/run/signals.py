"""Ctrl-C (SIGINT) in the run shell: one handler, `CtrlC`, for every place that
handles it (the command's imports, a run's build, compile and chunks, the
evaluation after a run). SIGTERM, what Slurm and Kubernetes send before they
preempt a job, is handled the same way: the run checkpoints the chunks done
and ends as for Ctrl-C (exit 130), instead of dying with a stale lock and
a checkpoint half-written.

A KeyboardInterrupt raised where Python or XLA cannot take it (inside XLA's
compiler, inside a gc callback of jax) crashes the process or is swallowed,
so most places only note the press (`pressed`) and stop at their next safe
point. The handler is installed only in the main thread and, for each
signal, only over its default handler (Python's KeyboardInterrupt for SIGINT,
the default action for SIGTERM): a handler someone else set is left alone.

This module imports nothing heavy: ``jaxwarp.cli`` uses it from the first
line of ``main``, before jax is imported.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

# The signals taken over, each with the handler it is taken over from.
_SIGNALS = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}


class CtrlC:
    """A SIGINT and SIGTERM handler in one of three modes (`notice`, `defer`):

    * at once (``notice`` None): raises KeyboardInterrupt as Python's handler
      does, and remembers it, so that one raised inside a gc callback (which
      Python only reports, "Exception ignored in: ...", and goes on) still
      stops the caller at `release(check=True)`, without that report;
    * deferred: sets `pressed` and prints ``notice`` on the first Ctrl-C; the
      caller stops at its next safe point;
    * deferred, handing back (``defer(notice, hand_back=True)``): each
      Ctrl-C prints ``notice`` and puts the previous handler back, so that
      a second Ctrl-C interrupts at once. SIGTERM is not handed back: a
      second one (a scheduler may signal twice) must not cut the checkpoint
      short; what ends a job that ignores it is the scheduler's SIGKILL.

    Used with `install` / `release`, or as a context manager.
    """

    def __init__(self, notice: str | None = None) -> None:
        self.pressed = False
        self.notice = notice
        self.hand_back = False
        self._previous: dict[int, Any] = {}  # signal -> the handler taken over
        self._hook: Any = None

    def install(self) -> None:
        """Takes SIGINT and SIGTERM over (main thread, each over its default
        handler only)."""
        self.pressed = False
        if self._previous or threading.current_thread() is not threading.main_thread():
            return
        for signum, default in _SIGNALS.items():
            if signal.getsignal(signum) is default:
                self._previous[signum] = signal.signal(signum, self._handle)
        if self._previous and self.notice is None:  # raising at once: maybe in a gc callback
            self._hook = sys.unraisablehook
            sys.unraisablehook = self._unraisable

    def defer(self, notice: str, hand_back: bool = False) -> None:
        """From now on a Ctrl-C prints `notice` and only sets `pressed`; with
        `hand_back`, it also puts the previous handler back (see the class)."""
        self.notice, self.hand_back = notice, hand_back

    def _handle(self, signum: int, frame: Any) -> None:
        first, self.pressed = not self.pressed, True
        if self.notice is None:
            raise KeyboardInterrupt
        if self.hand_back and signum == signal.SIGINT and signum in self._previous:
            signal.signal(signum, self._previous.pop(signum))
            print(self.notice, file=sys.stderr, flush=True)
        elif first:
            print(self.notice, file=sys.stderr, flush=True)

    def _unraisable(self, unraisable: Any) -> None:
        if not issubclass(unraisable.exc_type, KeyboardInterrupt):  # remembered: no report
            self._hook(unraisable)

    def release(self, check: bool = False) -> None:
        """The previous handler back; with `check`, KeyboardInterrupt if a
        Ctrl-C came (one that was caught or swallowed on its way)."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}
        if self._hook is not None:
            sys.unraisablehook = self._hook
            self._hook = None
        if check and self.pressed:
            self.pressed = False
            raise KeyboardInterrupt

    def __enter__(self) -> CtrlC:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
