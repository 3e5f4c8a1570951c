"""A run's metric log: metrics.jsonl, metrics.csv and TensorBoard.

One row per (update, seed): ``update, seed, env_steps, env_steps_per_s,
wall_s`` and then the trainer's metrics by name (``<group>/loss``,
``<group>/episode_return``, ...) and the episode metrics the env declares
(its ``episode_metrics`` hook, e.g. Tag's ``tags_per_episode``). The
*headline* figures of a run, those of its summary, progress bar and
learning curve, are every group's episode return and the env's episode
metrics (`is_headline`).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from jaxwarp.storage import atomic_write, open_own

METRICS_JSONL = "metrics.jsonl"
METRICS_CSV = "metrics.csv"
SUMMARY_FILE = "summary.json"


def is_headline(name: str, env_metrics: Collection[str]) -> bool:
    """Whether the column `name` is a group's episode return or one of the env's
    episode metrics (`jaxwarp.train.rollout.env_metric_names`)."""
    return name.endswith("episode_return") or name in env_metrics


def metric_rows(metrics: Mapping[str, np.ndarray], first_update: int, seeds: list[int],
                rate: float, wall_start: float, wall_end: float,
                settings: list[int] | None = None) -> list[dict[str, float]]:
    """name -> [members, n] arrays to one row per (update, member); seeds (and
    in a sweep `settings`): each member's seed (and setting). wall_s spreads
    the chunk's time evenly over its updates."""
    n = next(iter(metrics.values())).shape[1]
    rows = []
    for i in range(n):
        for s, seed in enumerate(seeds):
            # One column order for every env: update, seed, (setting,) env_steps,
            # env_steps_per_s, wall_s, then the metrics by name.
            row: dict[str, float] = {"update": first_update + i + 1, "seed": seed}
            if settings is not None:
                row["setting"] = settings[s]
            row |= {"env_steps": float(metrics["env_steps"][s, i]), "env_steps_per_s": rate,
                    "wall_s": wall_start + (wall_end - wall_start) * (i + 1) / n}
            row.update({k: float(v[s, i]) for k, v in sorted(metrics.items())
                        if k != "env_steps"})
            rows.append(row)
    return rows


def final_rows(rows: list[dict[str, float]]) -> list[dict[str, float]]:
    """The rows of the last update in `rows` (one per seed)."""
    last = max(r["update"] for r in rows)
    return [r for r in rows if r["update"] == last]


def final_means(rows: list[dict[str, float]], env_metrics: Collection[str]
                ) -> dict[str, float | None]:
    """Headline column -> its mean over the seeds at the last update (NaNs,
    seeds without a finished episode yet, left out; None if no seed has one)."""
    if not rows:
        return {}
    final = final_rows(rows)
    out = {}
    for k in final[0]:
        if is_headline(k, env_metrics):
            vals = [r[k] for r in final if not math.isnan(r[k])]
            out[k] = float(np.mean(vals)) if vals else None
    return out


def json_value(v: Any) -> Any:
    """NaN/inf -> None (null): strict JSON has no NaN or Infinity."""
    return None if isinstance(v, float) and not math.isfinite(v) else v


def read_metrics(out_dir: str | Path) -> list[dict[str, float]]:
    """Rows of a run's metrics.jsonl (None back to NaN).

    A last line cut short (a run stopped by a full disk or killed mid-write:
    no newline at its end and not a whole JSON object) is left out, so that
    the resume logs that update again; a bad line anywhere else, or a row
    that is not a run's (no integer "update", a value not a number or null),
    is a one-line ValueError naming it."""
    path = Path(out_dir) / METRICS_JSONL
    if not path.exists():
        return []
    text = path.read_text(errors="replace")
    lines = text.split("\n")
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            if i == len(lines) - 1:  # the unterminated last line: cut short
                break
            raise ValueError(f"{path}: line {i + 1} is not a metric row "
                             f"({' '.join(str(e).split())[:160]})") from None
        why = _foreign(row)
        if why:
            raise ValueError(f"{path}: line {i + 1} is not a metric row ({why})")
        rows.append({k: (math.nan if v is None else v) for k, v in row.items()})
    return rows


def _foreign(row: Any) -> str | None:
    """Why a parsed line of metrics.jsonl is not a metric row (None if it is)."""
    if not isinstance(row, dict):
        return "not a JSON object"
    if isinstance(row.get("update"), bool) or not isinstance(row.get("update"), int):
        return 'no integer "update"'
    for k, v in row.items():
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            return f"{k[:40]!r} is not a number"
    return None


def write_summary(out: Path, summary: Mapping[str, Any]) -> None:
    """out/summary.json (non-finite floats as null), renamed into place (`atomic_write`)."""
    atomic_write(out / SUMMARY_FILE, json.dumps(
        {k: json_value(v) if isinstance(v, float) else v for k, v in summary.items()},
        indent=2))


def summary_env_metrics(out: Path) -> tuple[str, ...]:
    """The env's episode metrics among the headline figures of out/summary.json
    ("final"), as the run wrote them; () where it is missing or unreadable."""
    try:
        final = json.loads((out / SUMMARY_FILE).read_text())["final"]
        return tuple(sorted(k for k in final if not k.endswith("episode_return")))
    except (OSError, ValueError, KeyError, TypeError):
        return ()


class MetricWriter:
    """Appends rows to JSONL + CSV, and seed-means to TensorBoard when available.

    keep_until: on resume, the last update of the checkpoint: rows logged
    after it are dropped (they are logged again); None starts empty files.
    Both files are first written whole beside the old ones and renamed over
    them (`atomic_write`), so a run killed meanwhile loses no row and a link
    at either name is replaced, not followed; rows are then appended
    (`open_own`: never through a link)."""

    def __init__(self, out_dir: Path, keep_until: int | None):
        self.jsonl = out_dir / METRICS_JSONL
        self.csv = out_dir / METRICS_CSV
        self.fields: list[str] | None = None
        kept = [] if keep_until is None else \
            [r for r in read_metrics(out_dir) if r["update"] <= keep_until]
        atomic_write(self.jsonl, "".join(_json_line(r) for r in kept))
        if kept:
            self.fields = list(kept[0])
            atomic_write(self.csv, self._csv_text(kept, header=True))
        else:  # made with the first rows (a link at the name goes, not what it names)
            self.csv.unlink(missing_ok=True)
        try:
            from tensorboardX import SummaryWriter
            self.tb = SummaryWriter(str(out_dir / "tensorboard"))
        except ImportError:
            self.tb = None

    def _csv_text(self, rows: list[dict[str, Any]], header: bool) -> str:
        f = io.StringIO(newline="")
        w = csv.DictWriter(f, fieldnames=self.fields or [], extrasaction="ignore")
        if header:
            w.writeheader()
        w.writerows(rows)
        return f.getvalue()

    def _append_csv(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        header = self.fields is None  # (the file is empty until the first rows)
        if header:
            self.fields = list(rows[0])
        _append(self.csv, self._csv_text(rows, header))

    def write(self, rows: list[dict[str, float]]) -> None:
        _append(self.jsonl, "".join(_json_line(r) for r in rows))
        self._append_csv(rows)
        if self.tb is not None:
            self._write_tensorboard(rows)

    def _write_tensorboard(self, rows: list[dict[str, float]]) -> None:
        by_update: dict[int, list[dict[str, float]]] = {}
        for r in rows:
            by_update.setdefault(int(r["update"]), []).append(r)
        for rs in by_update.values():
            step = int(rs[0]["env_steps"])
            for k in rs[0]:
                if k in ("update", "seed", "env_steps"):
                    continue
                vals = [r[k] for r in rs if math.isfinite(r[k])]
                if vals:
                    self.tb.add_scalar(k, float(np.mean(vals)), step)
        self.tb.flush()

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def _json_line(row: Mapping[str, Any]) -> str:
    return json.dumps({k: json_value(v) for k, v in row.items()}) + "\n"


def _append(path: Path, text: str) -> None:
    """Appends `text` to `path`, a plain file of the run's own (`open_own`)."""
    fd = open_own(path, os.O_WRONLY | os.O_APPEND)
    with os.fdopen(fd, "wb") as f:
        f.write(text.encode())


class NoWriter:
    """Processes other than 0 write no metrics."""

    def write(self, rows: list[dict[str, float]]) -> None:
        pass

    def close(self) -> None:
        pass
