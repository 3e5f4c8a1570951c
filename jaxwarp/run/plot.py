"""learning_curve.png: a run's headline figures against env-steps.

One panel per headline figure of metrics.jsonl (every group's episode
return and the episode metrics the env declares, see `metrics`): the mean
over seeds with its 95% interval, the levels of ``jaxwarp eval``
(out/eval.json) as labelled reference lines, eval's figures of the same
matchups in the title; and a panel of env-steps/s.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from jaxwarp.run.checkpoint import read_saved_config
from jaxwarp.run.metrics import is_headline, read_metrics, summary_env_metrics
from jaxwarp.storage import replacing

PLOT_FILE = "learning_curve.png"


def _eval_json(out: Path) -> dict[str, Any] | None:
    """out/eval.json (`jaxwarp eval`, or the end of `jaxwarp train`) when it is
    readable and every evaluated episode finished; else None (a figure over
    unfinished episodes is the zeros they started from, not a level)."""
    try:
        ev = json.loads((out / "eval.json").read_text())
        finished = [figs.get("finished", {"mean": 1.0})["mean"]
                    for figs in ev["matchups"].values()]
        ev["gain"].items()
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return ev if all(f == 1.0 for f in finished) else None


def _plural(group: str) -> str:
    """tagger -> taggers, adversary -> adversaries, agent -> agents."""
    if group.endswith("y") and group[-2:-1] not in tuple("aeiou"):
        return group[:-1] + "ies"
    return group if group.endswith("s") else group + "s"


def _trained_groups(out: Path, groups: list[str]) -> dict[str, bool]:
    """group -> whether the run updates its policy (config.yaml; True where unreadable)."""
    try:
        config, _ = read_saved_config(out)
        return {g: bool(config.policy(g).train) for g in groups}
    except Exception:  # noqa: BLE001 - labels only; the curve needs no config
        return {g: True for g in groups}


def _reference_lines(ev: Mapping[str, Any] | None, curve: str, groups: list[str],
                     trained: Mapping[str, bool]) -> list[tuple[float, str]]:
    """(level, label) of the eval levels that match `curve`, which was
    recorded with every group playing its training policy.

    One group: the uniformly random policy. Two groups: the curve's group
    random against the other's policy at the end of training (the level its
    curve would have without learning, where the other group's curve moved
    too); for a metric of the pair (e.g. tags), each group random against the
    other's policy. More groups: none (eval has no such matchup).
    """
    if ev is None:
        return []
    m = ev["matchups"]
    key = f"{curve[:-len('/episode_return')]}/return" if curve.endswith("/episode_return") \
        else curve
    if len(groups) == 1:
        fig = m.get("random", {}).get(key)
        return [(fig["mean"], f"random {_plural(groups[0])} (jaxwarp eval)")] if fig else []
    if len(groups) != 2:
        return []

    def policy_words(h: str) -> str:
        return f"trained {_plural(h)}" if trained.get(h, True) else \
            f"{_plural(h)}' fixed (untrained) policy"

    own = curve[:-len("/episode_return")] if curve.endswith("/episode_return") else None
    lines = []
    for g in groups:  # g random, the other group playing its final policy
        if own is not None and g != own:
            continue
        h = groups[1] if g == groups[0] else groups[0]
        fig = m.get(f"{h} trained", {}).get(key)
        if fig is not None:
            lines.append((fig["mean"], f"random {_plural(g)} vs {policy_words(h)}"))
    return lines


def _eval_title(ev: Mapping[str, Any] | None, curve: str, groups: list[str]) -> str:
    """The curve's name, what it plays against, and eval's figures (eval.json)
    of the matchup that its dashed line shows: for two groups, the group
    trained and random against the other's final policy (the dashed line is
    the random level); otherwise trained vs random against random others."""
    own = curve[:-len("/episode_return")] if curve.endswith("/episode_return") else None
    others = [h for h in groups if h != own]
    title = curve
    if own is not None and len(groups) > 1:
        title += f" (vs training {' and '.join(_plural(h) for h in others)})"
    if ev is None or own is None or own not in ev.get("gain", {}):
        return title
    seeds = ev.get("seeds", 1)
    over = f", {seeds} seeds" if seeds > 1 else ""
    if len(groups) == 2:  # the matchup of the dashed line: the other group's final policy
        h = others[0]
        m = ev["matchups"]
        mine, rand = (m.get(k, {}).get(f"{own}/return") for k in ("trained", f"{h} trained"))
        if mine is None or rand is None:
            return title
        return (f"{title}\neval vs the {_plural(h)}' final policy (update "
                f"{ev.get('update', '?')}{over}): trained {mine['mean']:.3g} vs random "
                f"{rand['mean']:.3g} (dashed)")
    s = ev["gain"][own]
    who = "vs random " + " and ".join(_plural(h) for h in others) if others else "vs random"
    return (f"{title}\neval {who} (update {ev.get('update', '?')}{over}): trained "
            f"{s['trained']:.3g} vs random {s['random']:.3g}, {s['delta']:+.3g} ± "
            f"{s['ci95']:.2g}")


def seed_band(vals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """vals f64[updates, seeds] (NaN before a seed's first finished episode)
    -> (mean, low, high) f64[updates]: the mean over the seeds that have a
    value and its 95% interval (Student's t, n - 1 degrees of freedom; NaN
    where fewer than 2 seeds have one)."""
    from scipy import stats  # a dependency of jax

    n = np.sum(np.isfinite(vals), axis=1)
    with warnings.catch_warnings():  # all-NaN rows before the first finished episode
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(vals, axis=1)
        sd = np.nanstd(vals, axis=1, ddof=1)
    half = np.full(mean.shape, np.nan)
    ok = n >= 2
    half[ok] = stats.t.ppf(0.975, n[ok] - 1) * sd[ok] / np.sqrt(n[ok])
    return mean, mean - half, mean + half



def _draw_curve(ax: Any, steps: np.ndarray, vals: np.ndarray, seeds: list[int],
                references: list[tuple[float, str]], title: str) -> None:
    """One panel: vals f64[updates, seeds] against steps f64[updates], the mean
    over seeds (with its 95% band for several seeds) and the reference lines."""
    mean, lo, hi = seed_band(vals)
    ax.plot(steps, mean, label=f"mean of {len(seeds)} seeds" if len(seeds) > 1
            else f"seed {seeds[0]}")
    if len(seeds) > 1:
        ax.fill_between(steps, lo, hi, alpha=0.25, label="95% interval over seeds")
    styles = iter(("--", ":", "-."))
    for level, label in references:
        ax.axhline(level, color="grey", linestyle=next(styles), label=label)
    ax.legend(fontsize=7)
    ax.set_title(title, fontsize=8)
    ax.set_xlabel("env steps (per seed)")
    ax.grid(alpha=0.3)


def plot_run(out_dir: str | Path, env_metrics: Collection[str] | None = None) -> Path | None:
    """learning_curve.png: episode return per policy group and the env's
    episode metrics (mean over seeds, shaded 95% interval over seeds with
    ``--seeds`` >= 2) and env-steps/s against env-steps. Every reference line
    says what it is (see `_reference_lines`: for groups trained against each
    other, a group random against the other's trained policy, not random
    against random), and each group's title gives eval's figures of that same
    matchup (one group: against random) when out/eval.json exists. Returns None without
    matplotlib or metrics.

    env_metrics: the names of the env's episode metrics (`jaxwarp.train.rollout.env_metric_names`);
    None: those the run's summary.json lists (none where it has no summary).
    """
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
    if env_metrics is None:
        env_metrics = summary_env_metrics(out)
    curves = sorted(k for k in rows[0] if is_headline(k, env_metrics))
    groups = [k[:-len("/episode_return")] for k in curves if k.endswith("/episode_return")]
    updates = sorted({int(r["update"]) for r in rows})
    by_update: dict[int, list[dict[str, float]]] = {u: [] for u in updates}
    for r in rows:
        by_update[int(r["update"])].append(r)
    steps = np.array([by_update[u][0]["env_steps"] for u in updates])
    seeds = sorted({int(r.get("seed", 0)) for r in rows})
    ev = _eval_json(out)
    trained = _trained_groups(out, groups)
    fig, axes = plt.subplots(1, len(curves) + 1, figsize=(5.2 * (len(curves) + 1), 4.0))
    for ax, k in zip(axes, curves):
        vals = np.array([[r[k] for r in by_update[u]] for u in updates], dtype=float)
        _draw_curve(ax, steps, vals, seeds, _reference_lines(ev, k, groups, trained),
                    _eval_title(ev, k, groups))
    axes[-1].plot(steps, [by_update[u][0]["env_steps_per_s"] for u in updates])
    axes[-1].set_title("env-steps/s (all seeds)", fontsize=8)
    axes[-1].set_xlabel("env steps (per seed)")
    axes[-1].grid(alpha=0.3)
    fig.tight_layout()
    path = out / PLOT_FILE
    try:
        with replacing(path) as f:  # whole or not at all, never through a link
            fig.savefig(f, format="png", dpi=110)
    finally:
        plt.close(fig)
    return path
