"""A sweep's answer on one page: each setting's curve over its seeds, ranked.

From a sweep's metrics.jsonl (rows with a ``setting`` column) `rank` gives,
per setting, the ranked figure's mean over seeds at the last update with its
95% interval (Student's t over the seeds), the area under the seed-mean
curve (its mean over updates) and the env-steps at which the seed-mean curve
first reaches a threshold. `write_report` writes them as sweep.json and
sweep.csv, every setting's curve in sweep.png, and the best setting's full
config as best.yaml (``jaxwarp train --config best.yaml`` trains it).
"""

from __future__ import annotations

import csv
import json
import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from jaxwarp.run.metrics import json_value, read_metrics
from jaxwarp.run.plot import seed_band
from jaxwarp.train.config import TrainConfig, setting_config

SWEEP_JSON, SWEEP_CSV, SWEEP_PLOT, BEST_YAML = "sweep.json", "sweep.csv", "sweep.png", "best.yaml"


def curves(rows: Sequence[Mapping[str, float]], metric: str, settings: int
           ) -> tuple[np.ndarray, list[np.ndarray]]:
    """(env_steps f64[updates], per setting f64[updates, seeds] of `metric`)."""
    updates = sorted({int(r["update"]) for r in rows})
    index = {u: i for i, u in enumerate(updates)}
    steps = np.zeros(len(updates))
    cells: list[dict[tuple[int, int], float]] = [{} for _ in range(settings)]
    for r in rows:
        i = index[int(r["update"])]
        steps[i] = r["env_steps"]
        cells[int(r["setting"])][(i, int(r["seed"]))] = r.get(metric, math.nan)
    out = []
    for c in cells:
        seeds = sorted({s for _, s in c})
        out.append(np.array([[c.get((i, s), math.nan) for s in seeds]
                             for i in range(len(updates))], dtype=float))
    return steps, out


def rank(rows: Sequence[Mapping[str, float]], settings: Sequence[Mapping[str, float]],
         metric: str, threshold: float | None = None) -> tuple[list[dict[str, Any]], float]:
    """(the settings ranked by their final mean of `metric`, best first; the
    threshold used: given, or the median of the settings' final means)."""
    steps, per = curves(rows, metric, len(settings))
    bands = [seed_band(v) for v in per]
    finals = [float(b[0][-1]) for b in bands]
    if threshold is None:
        ok = [f for f in finals if math.isfinite(f)]
        threshold = float(np.median(ok)) if ok else math.nan
    table = []
    for k, (mean, lo, hi) in enumerate(bands):
        reached = np.flatnonzero(mean >= threshold) if math.isfinite(threshold) else []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            auc = float(np.nanmean(mean))
        table.append({"setting": k, **settings[k], "final": finals[k],
                      "final_low": float(lo[-1]), "final_high": float(hi[-1]),
                      "auc": auc, "steps_to_threshold": float(steps[reached[0]])
                      if len(reached) else None})
    table.sort(key=lambda t: -t["final"] if math.isfinite(t["final"]) else math.inf)
    return table, threshold


def format_table(table: Sequence[Mapping[str, Any]], keys: Sequence[str], metric: str,
                 threshold: float | None) -> str:
    """The ranked table as text, one line per setting."""
    shown = "-" if threshold is None or not math.isfinite(threshold) else f"{threshold:.4g}"
    head = ["rank", *keys, f"final {metric} (95% CI)", "AUC", f"steps to {shown}"]
    lines = [head]
    for i, t in enumerate(table):
        band = "" if t["final_low"] is None or not math.isfinite(t["final_low"]) else \
            f" [{t['final_low']:.4g}, {t['final_high']:.4g}]"
        reach = t["steps_to_threshold"]
        lines.append([str(i + 1), *(f"{t[k]:.4g}" for k in keys), f"{_g(t['final'])}{band}",
                      _g(t["auc"]), "-" if reach is None else f"{reach:,.0f}"])
    widths = [max(len(r[j]) for r in lines) for j in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in lines)


def _g(v: float | None) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.4g}"


def write_report(out: Path, config: TrainConfig, settings: Sequence[Mapping[str, float]],
                 metric: str, threshold: float | None = None) -> dict[str, Any]:
    """sweep.json, sweep.csv, sweep.png (with matplotlib) and best.yaml in
    out; returns sweep.json's contents."""
    table, threshold = rank(read_metrics(out), settings, metric, threshold)
    keys = list(settings[0])
    report = {"metric": metric, "threshold": json_value(threshold), "keys": keys,
              "ranked": [{k: json_value(v) for k, v in t.items()} for t in table]}
    _replace(out / SWEEP_JSON, json.dumps(report, indent=1) + "\n")
    _write_csv(out / SWEEP_CSV, report["ranked"])
    best = setting_config(config, settings[table[0]["setting"]])
    _replace(out / BEST_YAML, yaml.safe_dump(best.to_dict(), sort_keys=False))
    plot_sweep(out, settings, metric)
    return report


def _replace(path: Path, text: str) -> None:
    """Writes beside `path` and renames over it (never through a link there)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    tmp.write_text(text)
    tmp.replace(path)


def _write_csv(path: Path, ranked: Sequence[Mapping[str, Any]]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["rank", *ranked[0]])
        w.writeheader()
        for i, t in enumerate(ranked):
            w.writerow({"rank": i + 1, **{k: "" if v is None else v for k, v in t.items()}})
    tmp.replace(path)


def plot_sweep(out: Path, settings: Sequence[Mapping[str, float]], metric: str) -> Path | None:
    """sweep.png: every setting's mean curve of `metric` over its seeds, with
    its 95% band (None without matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    steps, per = curves(read_metrics(out), metric, len(settings))
    fig, ax = plt.subplots(figsize=(8, 5))
    for k, vals in enumerate(per):
        mean, lo, hi = seed_band(vals)
        label = ", ".join(f"{key.split('.')[-1]}={v:.3g}" for key, v in settings[k].items())
        line, = ax.plot(steps, mean, label=label, linewidth=1.2)
        ax.fill_between(steps, lo, hi, alpha=0.12, color=line.get_color())
    seeds = per[0].shape[1]
    ax.set_title(f"{metric}: mean of {seeds} seed(s) per setting, 95% interval shaded",
                 fontsize=9)
    ax.set_xlabel("env steps (per seed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, ncol=2 if len(settings) > 8 else 1)
    fig.tight_layout()
    path = out / SWEEP_PLOT
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)
    return path


def ranked_metric(config: TrainConfig, groups: Sequence[str]) -> str:
    """What a sweep ranks by: the first trained group's episode return."""
    trained = [g for g in groups if config.policy(g).train] or list(groups)
    return f"{trained[0]}/episode_return"


def best_setting(out: Path, config: TrainConfig, settings: Sequence[Mapping[str, float]],
                 groups: Sequence[str]) -> int:
    """The index of a sweep's best setting: its report's first row, or ranked
    from its metrics where it has no report yet (setting 0 without metrics)."""
    try:
        return int(json.loads((out / SWEEP_JSON).read_text())["ranked"][0]["setting"])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        rows = read_metrics(out)
        return int(rank(rows, settings, ranked_metric(config, groups))[0][0]["setting"]) \
            if rows else 0
