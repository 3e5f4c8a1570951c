"""Learning curve of Tag on one device, against a random policy.

1. Random baseline: the same config with the taggers' policy replaced by a
   uniform random one, run long enough for episodes to finish; its mean
   tags per episode is the reference level.
2. Training run through `jaxwarp.run.loop.train_run` (the code behind
   ``jaxwarp train``) for a wall-clock budget (compile included).
3. Writes <out>/learn_tag.json (both curves, tags-per-episode ratio to
   random at the budget) and <out>/learn_tag.png (tags per episode vs
   wall-clock seconds, with the random level and 3x random).

    python experiments/learn_tag.py --config tag_warpdrive_default --minutes 5 \
        --out experiments/results/learn_tag_h100 policies.runner.model=uniform
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import time
from pathlib import Path

import numpy as np

from jaxwarp.run.loop import read_metrics, train_run
from jaxwarp.train import load_config
from jaxwarp.units import rate_text


def _series(rows, key):
    rows = sorted(rows, key=lambda r: r["update"])
    return ([r["wall_s"] for r in rows], [r["env_steps"] for r in rows], [r[key] for r in rows])


def plot(json_path: Path) -> Path | None:
    """learn_tag.png next to learn_tag.json (None without matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (rerun with --plot-only later)")
        return None
    res = json.loads(Path(json_path).read_text())
    tr, base = res["trained"], res["random"]["tags_per_episode"]
    s = res["summary"]
    tags = [math.nan if v is None else v for v in tr["tags_per_episode"]]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.plot(tr["wall_s"], tags, alpha=0.35, label="trained taggers (per update)")
    ax.plot(tr["wall_s"], tr["tags_per_episode_smoothed"],
            label=f"moving mean, {tr['smoothing_window_updates']} updates")
    ax.axhline(base, color="gray", ls="--", label=f"random taggers ({base:.2f})")
    ax.axhline(3 * base, color="gray", ls=":", label="3x random")
    ax.set_xlabel("wall-clock seconds (compile included)")
    ax.set_ylabel("tags per episode")
    rate = rate_text(s["env_steps_per_s"], s.get("agents_per_env"),
                     s.get("device") or s["devices"][0])  # older files: no agents, no device
    ax.set_title(f"{res['config']} {' '.join(res['overrides'])}\n"
                 f"{s['updates']} updates, {rate}", fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = Path(json_path).with_suffix(".png")
    fig.savefig(path, dpi=120)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("overrides", nargs="*", metavar="key=value")
    ap.add_argument("--config", default="tag_warpdrive_default")
    ap.add_argument("--minutes", type=float, default=5.0, help="training budget (wall clock)")
    ap.add_argument("--baseline-updates", type=int, default=20)
    ap.add_argument("--out", default="experiments/results/learn_tag")
    ap.add_argument("--plot-only", metavar="JSON", help="only redraw the plot of a result")
    args = ap.parse_args()
    if args.plot_only:
        print(plot(Path(args.plot_only)))
        return
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)

    config = load_config(args.config, args.overrides)
    random_cfg = load_config(args.config, [
        *args.overrides, "policies.tagger.model=uniform", "policies.tagger.train=false",
        f"total_env_steps={args.baseline_updates * config.num_envs * config.num_steps}",
        f"chunk_updates={args.baseline_updates}", f"checkpoint_every={args.baseline_updates}"])
    t = time.perf_counter()
    base = train_run(random_cfg, out / "random", progress=False)
    base_rows = read_metrics(out / "random")
    base_tags = float(np.nanmean([r["tags_per_episode"] for r in base_rows]))
    base_return = float(np.nanmean([r["tagger/episode_return"] for r in base_rows]))
    rate = rate_text(base.summary["env_steps_per_s"], base.summary["agents_per_env"],
                     base.summary["device"])
    print(f"random taggers: {base_tags:.2f} tags per episode ({rate}, "
          f"{time.perf_counter() - t:.0f} s)", flush=True)

    run = train_run(config, out / "trained", progress=False, time_limit_s=60 * args.minutes)
    rows = read_metrics(out / "trained")
    wall, steps, tags = _series(rows, "tags_per_episode")
    _, _, ret = _series(rows, "tagger/episode_return")
    # Per-update values are the latest finished episodes of each update:
    # judge on a moving mean over the last 5% of the updates (at least 5).
    window = max(5, len(tags) // 20)
    smooth = [float(np.nanmean(tags[max(0, i + 1 - window):i + 1]))
              if not all(math.isnan(v) for v in tags[max(0, i + 1 - window):i + 1]) else math.nan
              for i in range(len(tags))]
    final_tags = smooth[-1]
    first_3x = next((w for w, v in zip(wall, smooth) if not math.isnan(v) and v >= 3 * base_tags),
                    None)
    result = {
        "config": args.config, "overrides": args.overrides, "minutes": args.minutes,
        "summary": run.summary,
        "random": {"tags_per_episode": base_tags, "tagger_episode_return": base_return,
                   "updates": args.baseline_updates},
        "trained": {"final_tags_per_episode": final_tags,
                    "ratio_to_random": final_tags / base_tags if base_tags > 0 else None,
                    "first_wall_s_at_3x_random": first_3x,
                    "smoothing_window_updates": window,
                    "wall_s": wall, "env_steps": steps, "tags_per_episode": tags,
                    "tags_per_episode_smoothed": smooth,
                    "tagger_episode_return": ret},
    }
    (out / "learn_tag.json").write_text(json.dumps(
        result, indent=1, default=lambda v: None if isinstance(v, float) and math.isnan(v) else v))
    print(f"trained taggers: {final_tags:.2f} tags per episode after "
          f"{run.summary['updates']} updates ({wall[-1]:.0f} s incl. compile) = "
          f"{final_tags / base_tags:.2f}x random; 3x random first reached at {first_3x} s",
          flush=True)
    plot(out / "learn_tag.json")


if __name__ == "__main__":
    main()
