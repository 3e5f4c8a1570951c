"""Ctrl-C (SIGINT) in the run shell: one handler, `CtrlC`, for every place that
handles it (the command's imports, a run's build, compile and chunks, the
evaluation after a run).

A KeyboardInterrupt raised where Python or XLA cannot take it (inside XLA's
compiler, inside a gc callback of jax) crashes the process or is swallowed,
so most places only note the press (`pressed`) and stop at their next safe
point. The handler is installed only in the main thread and only over
Python's default handler; elsewhere KeyboardInterrupt arrives as usual.

This module imports nothing heavy: ``jaxwarp.cli`` uses it from the first
line of ``main``, before jax is imported.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any


class CtrlC:
    """A SIGINT handler in one of three modes (`notice`, `defer`):

    * at once (``notice`` None): raises KeyboardInterrupt as Python's handler
      does, and remembers it, so that one raised inside a gc callback (which
      Python only reports, "Exception ignored in: ...", and goes on) still
      stops the caller at `release(check=True)`, without that report;
    * deferred: sets `pressed` and prints ``notice`` on the first Ctrl-C; the
      caller stops at its next safe point;
    * deferred, handing back (``defer(notice, hand_back=True)``): each
      Ctrl-C prints ``notice`` and puts the previous handler back, so that
      a second Ctrl-C interrupts at once.

    Used with `install` / `release`, or as a context manager.
    """

    def __init__(self, notice: str | None = None) -> None:
        self.pressed = False
        self.notice = notice
        self.hand_back = False
        self._previous: Any = None
        self._hook: Any = None

    def install(self) -> None:
        """Takes SIGINT over (main thread, over Python's default handler only)."""
        self.pressed = False
        if self._previous is None and threading.current_thread() is threading.main_thread() \
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous = signal.signal(signal.SIGINT, self._handle)
            if self.notice is None:  # raising at once: it may be raised inside a gc callback
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
        if self.hand_back:
            signal.signal(signal.SIGINT, self._previous)
            print(self.notice, file=sys.stderr, flush=True)
        elif first:
            print(self.notice, file=sys.stderr, flush=True)

    def _unraisable(self, unraisable: Any) -> None:
        if not issubclass(unraisable.exc_type, KeyboardInterrupt):  # remembered: no report
            self._hook(unraisable)

    def release(self, check: bool = False) -> None:
        """The previous handler back; with `check`, KeyboardInterrupt if a
        Ctrl-C came (one that was caught or swallowed on its way)."""
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
        if self._hook is not None:
            sys.unraisablehook = self._hook
            self._hook = None
        if check and self.pressed:
            self.pressed = False
            raise KeyboardInterrupt

    def __enter__(self) -> CtrlC:
        self.install()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
