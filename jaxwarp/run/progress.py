"""What a run shows while it trains: once per chunk, the rate and the headline
figures of the chunk's last update, as a progress bar or one line (`Progress`)."""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from jaxwarp.run.metrics import final_rows, is_headline
from jaxwarp.units import device_name, rate_text


class Progress:
    """Once per chunk, the rate and the headline figures of the chunk's last
    update: a rich progress bar (progress True and stdout a terminal), or one
    line on stdout (progress "lines", or stdout not a terminal: a log, a
    pipe, a batch job), or nothing (progress False)."""

    def __init__(self, total: int, done: int, batch: int, enabled: bool | str,
                 env_metrics: tuple[str, ...] = (), agents: int = 1, device: str | None = None):
        self.agents, self.total, self.done = agents, total, done
        self.device = device or device_name()  # the run's devices (`Run.devices`), named
        self.env_metrics = env_metrics
        self.lines = enabled == "lines" or (bool(enabled) and not _is_tty(sys.stdout))
        self.enabled = bool(enabled) and not self.lines
        if not self.enabled:
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.p = Progress(TextColumn("updates"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), TimeRemainingColumn(),
                          TextColumn("{task.fields[info]}"))
        self.task = self.p.add_task("train", total=total, completed=done, info="compiling")
        self.p.start()

    def advance(self, n: int, rate: float, rows: list[dict[str, float]]) -> None:
        self.done += n
        if not (self.enabled or self.lines):
            return
        final = final_rows(rows)
        parts = [rate_text(rate, self.agents, self.device)]
        for k in sorted(final[0]):
            if is_headline(k, self.env_metrics):
                vals = [r[k] for r in final if not math.isnan(r[k])]
                # NaN until an env finishes its first episode: said, not shown as nan
                parts.append(f"{k.replace('/episode_return', '')} {np.mean(vals):.3g}" if vals
                             else f"{k.replace('/episode_return', '')} - (no episode ended yet)")
        if self.lines:
            print(f"update {self.done}/{self.total}  " + "  ".join(parts), flush=True)
        else:
            self.p.update(self.task, advance=n, info="  ".join(parts))

    def close(self) -> None:
        if self.enabled:
            self.p.stop()


def _is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced or closed stream
        return False
