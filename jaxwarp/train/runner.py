"""Host side of a training run: jitted chunks, progress, logs, checkpoints, plot.

The device program is `trainer.run` over ``chunk_updates`` updates, vmapped
over seeds and jitted once with the runner state donated; between chunks the
host writes metrics (JSONL, CSV, TensorBoard), shows progress and saves an
Orbax checkpoint every ``checkpoint_every`` updates. Nothing syncs per env
step. ``resume=True`` restores the latest checkpoint of an output folder and
continues; because every update is a pure function of the restored state,
the resumed run reproduces the uninterrupted one.
"""

from __future__ import annotations

import csv
import json
import math
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import yaml

from jaxwarp.train.config import ConfigError, TrainConfig, config_from_dict
from jaxwarp.train.trainer import RunnerState, build_trainer

CONFIG_FILE = "config.yaml"
METRICS_JSONL = "metrics.jsonl"
METRICS_CSV = "metrics.csv"
SUMMARY_FILE = "summary.json"
PLOT_FILE = "learning_curve.png"


@dataclass
class RunResult:
    """What a run leaves behind (also on disk under `out_dir`)."""

    out_dir: Path
    state: RunnerState  # final state, leading [seeds] axis
    metrics: list[dict[str, float]]  # one row per (update, seed), this process's rows
    summary: dict[str, Any]


def _rows(metrics: Mapping[str, np.ndarray], first_update: int, seeds: list[int],
          rate: float, wall_start: float, wall_end: float) -> list[dict[str, float]]:
    """name -> [seeds, n] arrays to one row per (update, seed); wall_s spreads
    the chunk's time evenly over its updates."""
    n = next(iter(metrics.values())).shape[1]
    rows = []
    for i in range(n):
        for s, seed in enumerate(seeds):
            row: dict[str, float] = {"update": first_update + i + 1, "seed": seed}
            row.update({k: float(v[s, i]) for k, v in sorted(metrics.items())})
            row["env_steps_per_s"] = rate
            row["wall_s"] = wall_start + (wall_end - wall_start) * (i + 1) / n
            rows.append(row)
    return rows


def _json_value(v: float) -> Any:
    return None if isinstance(v, float) and math.isnan(v) else v


class _MetricWriter:
    """Appends rows to JSONL + CSV, and seed-means to TensorBoard when available."""

    def __init__(self, out_dir: Path, keep_until: int | None):
        self.jsonl = out_dir / METRICS_JSONL
        self.csv = out_dir / METRICS_CSV
        self.fields: list[str] | None = None
        if keep_until is not None:  # resume: drop rows logged after the checkpoint
            kept = [r for r in read_metrics(out_dir) if r["update"] <= keep_until]
            self.jsonl.write_text("".join(json.dumps(r) + "\n" for r in kept))
            self.csv.unlink(missing_ok=True)
            self._append_csv(kept)
        else:
            self.jsonl.write_text("")
            self.csv.unlink(missing_ok=True)
        try:
            from tensorboardX import SummaryWriter
            self.tb = SummaryWriter(str(out_dir / "tensorboard"))
        except ImportError:
            self.tb = None

    def _append_csv(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        new = not self.csv.exists()
        if self.fields is None:
            self.fields = list(rows[0])
        with self.csv.open("a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=self.fields, extrasaction="ignore")
            if new:
                w.writeheader()
            w.writerows(rows)

    def write(self, rows: list[dict[str, float]]) -> None:
        with self.jsonl.open("a") as f:
            for r in rows:
                f.write(json.dumps({k: _json_value(v) for k, v in r.items()}) + "\n")
        self._append_csv(rows)
        if self.tb is not None:
            by_update: dict[int, list[dict[str, float]]] = {}
            for r in rows:
                by_update.setdefault(int(r["update"]), []).append(r)
            for u, rs in by_update.items():
                step = int(rs[0]["env_steps"])
                for k in rs[0]:
                    if k in ("update", "seed", "env_steps"):
                        continue
                    vals = [r[k] for r in rs if not math.isnan(r[k])]
                    if vals:
                        self.tb.add_scalar(k, float(np.mean(vals)), step)
            self.tb.flush()

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def read_metrics(out_dir: str | Path) -> list[dict[str, float]]:
    """Rows of a run's metrics.jsonl (None back to NaN)."""
    path = Path(out_dir) / METRICS_JSONL
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            rows.append({k: (math.nan if v is None else v) for k, v in json.loads(line).items()})
    return rows


def _checkpointer(out_dir: Path):
    import orbax.checkpoint as ocp

    return ocp.CheckpointManager(
        (out_dir / "checkpoints").absolute(),
        options=ocp.CheckpointManagerOptions(max_to_keep=2, create=True))


def train_run(config: TrainConfig | None = None, out_dir: str | Path = "runs/latest",
              seeds: int = 1, resume: bool = False, progress: bool = True,
              stop_after_updates: int | None = None, time_limit_s: float | None = None,
              env: Any = None,
              models: Mapping[str, Any] | None = None) -> RunResult:
    """Trains `seeds` seeds of `config` (seed, seed+1, ...) in one program.

    out_dir receives config.yaml, metrics.jsonl/.csv, tensorboard/ (with
    tensorboardX), checkpoints/ (Orbax), summary.json and
    learning_curve.png (with matplotlib). resume: continue the run saved in
    out_dir (its config.yaml; `config` must be None or equal to it).
    stop_after_updates: stop early after that many updates of this process
    (at a chunk boundary, as if killed; used by tests). time_limit_s: stop
    at the first chunk boundary after that many seconds (compile included);
    the run can be resumed later.
    """
    import orbax.checkpoint as ocp

    out = Path(out_dir)
    if resume:
        saved = out / CONFIG_FILE
        if not saved.exists():
            raise FileNotFoundError(f"--resume {out}: no {CONFIG_FILE} there (not a jaxwarp run)")
        meta = yaml.safe_load(saved.read_text())
        saved_config = config_from_dict(meta["config"])
        if config is not None and config != saved_config:
            raise ConfigError(f"--resume {out}: the given config differs from the saved one; "
                              "resume takes its config from the run folder")
        config, seeds = saved_config, int(meta["seeds"])
    else:
        if config is None:
            raise ValueError("train_run: config is required unless resume=True")
        if (out / "checkpoints").exists() and any((out / "checkpoints").iterdir()):
            raise FileExistsError(f"{out} already holds a run; pass --resume {out} to continue "
                                  "it or choose another --out")
        out.mkdir(parents=True, exist_ok=True)
        (out / CONFIG_FILE).write_text(yaml.safe_dump(
            {"config": config.to_dict(), "seeds": seeds}, sort_keys=False))
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1; got {seeds}")

    trainer = build_trainer(config, env=env, models=models)
    num_updates = trainer.derived.num_updates
    chunk = min(config.chunk_updates, num_updates)
    seed_ids = [config.seed + i for i in range(seeds)]
    keys = jnp.stack([jax.random.PRNGKey(s) for s in seed_ids])

    init = jax.jit(jax.vmap(trainer.init))
    run_chunk = jax.jit(jax.vmap(lambda rs: trainer.run(rs, chunk)), donate_argnums=0)

    mngr = _checkpointer(out)
    t0 = time.perf_counter()
    done_updates = 0
    if resume and mngr.latest_step() is not None:
        done_updates = int(mngr.latest_step())
        abstract = jax.eval_shape(init, keys)
        rs = mngr.restore(done_updates, args=ocp.args.StandardRestore(abstract))
    else:
        rs = init(keys)
    writer = _MetricWriter(out, keep_until=done_updates if resume else None)

    compiled = run_chunk.lower(rs).compile()
    compile_s = time.perf_counter() - t0
    rows: list[dict[str, float]] = []
    bar = _Progress(num_updates, done_updates, trainer.derived.batch_env_steps, progress)
    run_s = 0.0
    stopped_early = False
    try:
        while done_updates < num_updates:
            if (stop_after_updates is not None and len(rows) // seeds >= stop_after_updates) \
                    or (time_limit_s is not None and time.perf_counter() - t0 >= time_limit_s):
                stopped_early = True
                break
            n = min(chunk, num_updates - done_updates)
            t = time.perf_counter()
            if n == chunk:
                rs, metrics = compiled(rs)
            else:  # a last, shorter chunk compiles once more
                rs, metrics = jax.jit(jax.vmap(lambda r: trainer.run(r, n)))(rs)
            metrics = jax.device_get(metrics)
            dt = time.perf_counter() - t
            run_s += dt
            rate = n * trainer.derived.batch_env_steps * seeds / dt
            new = _rows(metrics, done_updates, seed_ids, rate, t - t0, t - t0 + dt)
            writer.write(new)
            rows.extend(new)
            done_updates += n
            if done_updates % config.checkpoint_every == 0 or done_updates == num_updates:
                mngr.save(done_updates, args=ocp.args.StandardSave(rs))
            bar.advance(n, rate, new)
    finally:
        bar.close()
        mngr.wait_until_finished()
        mngr.close()
        writer.close()

    all_rows = read_metrics(out)
    steps_done = len(rows) // seeds * trainer.derived.batch_env_steps * seeds
    summary = {
        "env": config.env, "backend": trainer.env.backend, "seeds": seeds,
        "updates": done_updates, "num_updates": num_updates,
        "env_steps_per_seed": done_updates * trainer.derived.batch_env_steps,
        "compile_s": compile_s, "run_s": run_s,
        "env_steps_per_s": steps_done / run_s if run_s > 0 else math.nan,
        "devices": [str(d) for d in jax.devices()],
        "finished": done_updates == num_updates, "stopped_early": stopped_early,
        "final": {k: v for k, v in _final_means(all_rows).items()},
    }
    (out / SUMMARY_FILE).write_text(json.dumps(
        {k: _json_value(v) if isinstance(v, float) else v for k, v in summary.items()},
        indent=2))
    if done_updates == num_updates:
        plot_run(out)
    return RunResult(out_dir=out, state=rs, metrics=rows, summary=summary)


def _final_means(rows: list[dict[str, float]]) -> dict[str, float | None]:
    if not rows:
        return {}
    last = max(r["update"] for r in rows)
    final = [r for r in rows if r["update"] == last]
    out = {}
    for k in final[0]:
        if k.endswith("episode_return") or k == "tags_per_episode":
            vals = [r[k] for r in final if not math.isnan(r[k])]
            out[k] = float(np.mean(vals)) if vals else None
    return out


class _Progress:
    """A rich progress bar updated once per chunk (no-op when disabled)."""

    def __init__(self, total: int, done: int, batch: int, enabled: bool):
        self.enabled = enabled
        if not enabled:
            return
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)

        self.p = Progress(TextColumn("updates"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), TimeRemainingColumn(),
                          TextColumn("{task.fields[info]}"))
        self.task = self.p.add_task("train", total=total, completed=done, info="compiling")
        self.p.start()

    def advance(self, n: int, rate: float, rows: list[dict[str, float]]) -> None:
        if not self.enabled:
            return
        last = max(r["update"] for r in rows)
        final = [r for r in rows if r["update"] == last]
        parts = [f"{rate:,.0f} env-steps/s"]
        for k in sorted(final[0]):
            if k.endswith("episode_return") or k == "tags_per_episode":
                vals = [r[k] for r in final if not math.isnan(r[k])]
                if vals:
                    parts.append(f"{k.replace('/episode_return', '')} {np.mean(vals):.3g}")
        self.p.update(self.task, advance=n, info="  ".join(parts))

    def close(self) -> None:
        if self.enabled:
            self.p.stop()


def plot_run(out_dir: str | Path) -> Path | None:
    """learning_curve.png: episode return per policy group (seed mean, min-max band)
    and env-steps/s against env-steps. Returns None without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    out = Path(out_dir)
    rows = read_metrics(out)
    if not rows:
        return None
    curves = sorted(k for k in rows[0] if k.endswith("episode_return")
                    or k == "tags_per_episode")
    updates = sorted({int(r["update"]) for r in rows})
    by_update: dict[int, list[dict[str, float]]] = {u: [] for u in updates}
    for r in rows:
        by_update[int(r["update"])].append(r)
    steps = np.array([by_update[u][0]["env_steps"] for u in updates])
    fig, axes = plt.subplots(1, len(curves) + 1, figsize=(4.5 * (len(curves) + 1), 3.6))
    for ax, k in zip(axes, curves):
        vals = np.array([[r[k] for r in by_update[u]] for u in updates], dtype=float)
        with warnings.catch_warnings():  # all-NaN before the first finished episode
            warnings.simplefilter("ignore", RuntimeWarning)
            ax.plot(steps, np.nanmean(vals, axis=1), label="mean over seeds")
            if vals.shape[1] > 1:
                ax.fill_between(steps, np.nanmin(vals, axis=1), np.nanmax(vals, axis=1),
                                alpha=0.25, label="min-max")
        ax.set_title(k)
        ax.set_xlabel("env steps (per seed)")
        ax.grid(alpha=0.3)
    axes[-1].plot(steps, [by_update[u][0]["env_steps_per_s"] for u in updates])
    axes[-1].set_title("env-steps/s (all seeds)")
    axes[-1].set_xlabel("env steps (per seed)")
    axes[-1].grid(alpha=0.3)
    fig.tight_layout()
    path = out / PLOT_FILE
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
