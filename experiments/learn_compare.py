"""Does a speed option still learn as well? Learning curves of Tag's taggers
for several variants of one config, at the same number of env-steps.

Each variant (a name and its key=value overrides on top of the shared
overrides) trains through `jaxwarp.run.loop.train_run` (the code behind
``jaxwarp train``) for ``--env-steps``; a random-tagger baseline of the same
config gives the reference level (the runs themselves go to --work, by
default a temporary folder). Writes <out>/learn_compare.json (per
variant: tags per episode and tagger return per update, the moving mean,
throughput) and <out>/learn_compare.png (tags per episode vs env-steps).

    python experiments/learn_compare.py --config tag_chase --env-steps 30000000 \
        --variant f32 --variant bf16 policies.tagger.dtype=bfloat16 obs_dtype=bfloat16 \
        --out experiments/results/learn_compare_h100

With ``--seeds S`` every variant trains seeds 0..S-1 (one run each) and the
summary gives the mean final tags per episode with a 95% interval over seeds
(t distribution), so that two variants, or two commits, can be compared.

A variant's ``@xla_layers`` (not a config key) runs its `mlp` models on XLA's
layers where they would run on the fused kernels (`mlp_kernel.layout_for`
patched for that variant's runs: the comparison lives here, not in the
package).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import tempfile
from pathlib import Path

import numpy as np

from jaxwarp.benchmark import run_meta
from jaxwarp.models import mlp_kernel
from jaxwarp.run.loop import read_metrics, train_run
from jaxwarp.train import load_config
from jaxwarp.units import rate_text


def moving_mean(values: list[float], window: int) -> list[float]:
    out = []
    for i in range(len(values)):
        part = [v for v in values[max(0, i + 1 - window):i + 1] if not math.isnan(v)]
        out.append(float(np.mean(part)) if part else math.nan)
    return out


def summarize(finals: list[float]) -> dict[str, float]:
    """Mean of the seeds' final values and the half-width of its 95% interval
    (Student's t with n - 1 degrees of freedom; 0 for one seed)."""
    x = np.asarray(finals, np.float64)
    n = len(x)
    if n < 2:
        return {"n": n, "mean": float(x.mean()), "ci95": 0.0}
    from scipy import stats

    half = stats.t.ppf(0.975, n - 1) * x.std(ddof=1) / math.sqrt(n)
    return {"n": n, "mean": float(x.mean()), "ci95": float(half)}


def plot(res: dict, path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, v in res["variants"].items():
        ax.plot(np.asarray(v["env_steps"]) / 1e6, v["tags_per_episode_smoothed"],
                label=f"{name} ({rate_text(v['env_steps_per_s'], v.get('agents_per_env'))})")
    ax.axhline(res["random_tags_per_episode"], color="gray", ls="--", label="random taggers")
    ax.set_xlabel("env-steps (millions)")
    ax.set_ylabel(f"tags per episode (moving mean, {res['window']} updates)")
    device = (res.get("meta") or {}).get("device")
    ax.set_title(" ".join([res["config"], *res["overrides"], *(["on", device] if device else [])]),
                 fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("overrides", nargs="*", metavar="key=value", help="for every variant")
    ap.add_argument("--config", default="tag_chase")
    ap.add_argument("--variant", nargs="+", action="append", required=True,
                    metavar=("NAME", "KEY=VALUE"), help="a name and its overrides (repeatable)")
    ap.add_argument("--env-steps", type=int, default=30_000_000)
    ap.add_argument("--seeds", type=int, default=1,
                    help="seeds per variant (0..S-1); the summary's interval is over them")
    ap.add_argument("--baseline-updates", type=int, default=20)
    ap.add_argument("--out", default="experiments/results/learn_compare")
    ap.add_argument("--work", default=None,
                    help="folder for the runs themselves (default: a temporary one)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work or tempfile.mkdtemp(prefix="learn_compare_"))
    if args.work and work.exists() and any(work.iterdir()):
        ap.error(f"--work {work} is not empty")

    config = load_config(args.config, args.overrides)
    batch = config.num_envs * config.num_steps
    base_cfg = load_config(args.config, [
        *args.overrides, "policies.tagger.model=uniform", "policies.tagger.train=false",
        f"total_env_steps={args.baseline_updates * batch}",
        f"chunk_updates={args.baseline_updates}", f"checkpoint_every={args.baseline_updates}"])
    train_run(base_cfg, work / "random", progress=False)
    base = float(np.nanmean([r["tags_per_episode"] for r in read_metrics(work / "random")]))
    print(f"random taggers: {base:.2f} tags per episode", flush=True)

    updates = max(1, args.env_steps // batch)
    chunk = min(config.chunk_updates, updates)
    window = max(5, updates // 20)
    res = {"meta": run_meta(), "config": args.config, "seeds": args.seeds, "overrides": args.overrides, "env_steps": updates * batch,
           "random_tags_per_episode": base, "window": window, "variants": {}}
    for name, *extra in args.variant:
        xla_layers = "@xla_layers" in extra
        extra = [e for e in extra if e != "@xla_layers"]
        for seed in range(args.seeds):
            label = name if args.seeds == 1 else f"{name}/seed{seed}"
            cfg = load_config(args.config, [*args.overrides, *extra, f"seed={seed}",
                                            f"total_env_steps={updates * batch}",
                                            f"chunk_updates={chunk}",
                                            f"checkpoint_every={updates // chunk * chunk}"])
            layout_for = mlp_kernel.layout_for
            if xla_layers:
                mlp_kernel.layout_for = lambda *a, **kw: None
            try:
                run = train_run(cfg, work / label.replace("/", "_"), progress=False)
            finally:
                mlp_kernel.layout_for = layout_for
            rows = sorted(read_metrics(work / label.replace("/", "_")), key=lambda r: r["update"])
            tags = [float(r["tags_per_episode"]) for r in rows]
            smooth = moving_mean(tags, window)
            res["variants"][label] = {
                "overrides": extra, "xla_layers": xla_layers, "seed": seed,
                "model_layers": run.summary.get("model_layers"),
                "env_steps_per_s": run.summary["env_steps_per_s"],
                "agents_per_env": run.summary["agents_per_env"],
                "agent_steps_per_s": run.summary["agent_steps_per_s"],
                "final_tags_per_episode": smooth[-1], "ratio_to_random": smooth[-1] / base,
                "env_steps": [r["env_steps"] for r in rows], "tags_per_episode": tags,
                "tags_per_episode_smoothed": smooth,
                "tagger_episode_return": [float(r["tagger/episode_return"]) for r in rows],
                "runner_episode_return": [float(r.get("runner/episode_return", math.nan))
                                          for r in rows]}
            rate = rate_text(run.summary["env_steps_per_s"], run.summary["agents_per_env"],
                             run.summary["device"])
            print(f"{label}: {smooth[-1]:.2f} tags per episode after {updates * batch:,} "
                  f"env-steps ({smooth[-1] / base:.2f}x random, {rate})", flush=True)
            mine = [v for k, v in res["variants"].items() if k == name or k.startswith(name + "/")]
            res.setdefault("summary", {})[name] = summarize(
                [v["final_tags_per_episode"] for v in mine])
            runner = [moving_mean(v["runner_episode_return"], window)[-1] for v in mine]
            if not any(math.isnan(r) for r in runner):  # the runners learn too
                res.setdefault("runner_return", {})[name] = summarize(runner)
            (out / "learn_compare.json").write_text(json.dumps(
                res, indent=1, default=lambda v: None if isinstance(v, float) and math.isnan(v)
                else v))
        if args.seeds > 1:
            sm = res["summary"][name]
            print(f"{name}: {sm['mean']:.2f} +- {sm['ci95']:.2f} tags per episode "
                  f"(95% interval over {sm['n']} seeds)", flush=True)
            if name in res.get("runner_return", {}):
                rr = res["runner_return"][name]
                print(f"{name}: runners' return {rr['mean']:.3f} +- {rr['ci95']:.3f}", flush=True)
    plot(res, out / "learn_compare.png")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
