"""When a run stops before its last update, at a chunk boundary: the stop rules
(updates or time limit reached, Ctrl-C: `stop_decision`), a loss or the
parameters turned NaN/inf (`stop_non_finite`), and the checkpoint that an
interrupted run keeps (`save_interrupted`)."""

from __future__ import annotations

import sys
import time

import numpy as np

from jaxwarp.errors import NonFiniteError
from jaxwarp.run import distributed
from jaxwarp.run.checkpoint import save_checkpoint
from jaxwarp.run.metrics import METRICS_JSONL
from jaxwarp.run.progress import Progress
from jaxwarp.run.signals import CtrlC
from jaxwarp.run.state import Run
from jaxwarp.storage import writing

GO_ON, STOP, INTERRUPTED = 0, 1, 2  # what `stop_decision` returns


def stop_decision(run: Run, ctrl_c: CtrlC, stop_after_updates: int | None,
                  time_limit_s: float | None) -> int:
    """GO_ON, STOP (updates or time limit reached) or INTERRUPTED (Ctrl-C):
    process 0's clock and Ctrl-C decide for all."""
    stop = (stop_after_updates is not None
            and len(run.rows) // run.members >= stop_after_updates) \
        or (time_limit_s is not None and time.perf_counter() - run.t0 >= time_limit_s)
    return distributed.same_on_all(INTERRUPTED if ctrl_c.pressed else STOP if stop else GO_ON)


def stop_non_finite(run: Run, new: list[dict[str, float]], finite: np.ndarray) -> None:
    """Logs the chunk's rows up to the first update with NaN/inf (for
    diagnosis) and sets run.failure naming it; finite: bool[seeds, n]."""
    i = int(np.argmin(finite.all(axis=0)))  # first update with NaN/inf
    bad = [run.seed_ids[s] for s in np.flatnonzero(~finite[:, i])]
    new = new[:(i + 1) * run.members]
    with writing(run.out, METRICS_JSONL):
        run.writer.write(new)
    run.rows.extend(new)
    last = max(run.mngr.all_steps(), default=None)
    run.failure = NonFiniteError(
        f"update {run.done_updates + i + 1}: the loss or the parameters became "
        f"non-finite (NaN/inf) for seed(s) {bad}; training stopped, "
        + (f"checkpoints up to update {last} kept" if last is not None
           else "no checkpoint written")
        + " (lower the learning rate or check env_params)")


def save_interrupted(run: Run, bar: Progress) -> None:
    """Ctrl-C: keeps the last completed chunk as a checkpoint as any other
    (Orbax writes it to a temporary folder and renames it when complete; the
    wait in `loop._train` lets it finish), so that --resume goes on from it."""
    if run.settled and run.done_updates > 0 and run.saved_at != run.done_updates:
        bar.close()
        if run.primary:
            print(f"jaxwarp train: interrupted; saving a checkpoint at update "
                  f"{run.done_updates}", file=sys.stderr)
        with writing(run.out, f"a checkpoint (saving update {run.done_updates})"):
            save_checkpoint(run.mngr, run.done_updates, run.rs, force=True)
