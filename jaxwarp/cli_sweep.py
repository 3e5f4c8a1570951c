"""``jaxwarp sweep``: hyperparameter settings x seeds trained as one program,
then the ranked table, the curves and the best setting (docs/sweeps.md).

    jaxwarp sweep --config NAME key=a,b,c [key=uniform(lo,hi) --samples N]
                  [key=value ...] [--seeds S] [--out DIR] [--threshold R]
    jaxwarp sweep --resume DIR [--threshold R]

Like `jaxwarp.cli`, nothing heavy at module level.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from jaxwarp.cli_args import add_run_arguments
from jaxwarp.errors import ConfigError


def add_sweep(sub: Any) -> None:
    """The `sweep` subcommand's parser."""
    from jaxwarp.train.hyper import SWEEPABLE

    s = sub.add_parser(
        "sweep", help="train hyperparameter settings x seeds as one program, ranked",
        description="Trains every setting of the swept keys with every seed in one compiled "
        "program (vmap; in chunks of its runs, one after the other, when they do not all fit "
        "in memory), then ranks the settings by the first trained group's final episode "
        "return (mean and 95% interval over seeds), writes sweep.json, sweep.csv, sweep.png "
        "and best.yaml (jaxwarp train --config DIR/best.yaml trains the best). Ctrl-C and "
        f"--resume as for train. Sweepable: {', '.join(SWEEPABLE)}, policies.<group>.lr and "
        "the env's params that change no shape, env_params.<name>.")
    add_run_arguments(s, "key=a,b,c: a grid; key=uniform(lo,hi) or key=loguniform(lo,hi): "
                      "drawn per setting (with --samples); key=value: a plain override",
                      "continue the sweep saved in DIR", sweep=True)
    s.add_argument("--samples", type=int, default=None, metavar="N",
                   help="random draws of the uniform/loguniform keys (crossed with the grid)")
    s.add_argument("--threshold", type=float, default=None, metavar="R",
                   help="the return whose first crossing the table times (default: the median "
                   "of the settings' final returns)")


def sweep(args: argparse.Namespace) -> int:
    """`jaxwarp sweep`: exit status (130: interrupted). Bad input raises
    (ConfigError, ValueError, RunError, ...): `jaxwarp.cli` prints it in one
    line and exits 2."""
    out, config, sw = _resume_args(args) if args.resume else _new_args(args)
    from jaxwarp.run.loop import train_run

    try:
        result = train_run(config, out, seeds=args.seeds, resume=bool(args.resume),
                           progress="lines" if args.no_progress else True, sweep=sw)
    except KeyboardInterrupt:
        print(f"jaxwarp sweep: interrupted; continue with: jaxwarp sweep --resume {out}",
              file=sys.stderr)
        return 130
    status = _report(result, args.threshold)
    from jaxwarp.run.distributed import finish

    finish()  # several processes: all end together, quietly (one process: returns at once)
    return status


def _new_args(args: argparse.Namespace) -> tuple[str, Any, Any]:
    """(out, config, sweep) of a new sweep; every setting checked before compiling."""
    from jaxwarp.train.config import default_config_for, load_config
    from jaxwarp.train.seeds import check_seeds
    from jaxwarp.train.sweep import parse_sweep, same_program

    plain, sw = parse_sweep(args.overrides, args.samples)
    if args.env:
        plain.insert(0, f"env={args.env}")
    source = args.config or (default_config_for(args.env) if args.env else None)
    config = load_config(source, plain)
    sw = dataclasses.replace(sw, seed=config.seed)  # the draws follow the config's seed
    configs = sw.configs(config)
    same_program(config, configs)
    try:
        check_seeds(config.seed, args.seeds)
        check_seeds(0, args.seeds * len(configs))
    except ValueError as e:
        raise ConfigError(f"--seeds {args.seeds} x {len(configs)} settings: {e}") from None
    out = args.out or f"runs/sweep-{config.env}-{time.strftime('%Y%m%d-%H%M%S')}"
    return out, config, sw


def _resume_args(args: argparse.Namespace) -> tuple[str, None, None]:
    from jaxwarp.run.checkpoint import read_saved_sweep

    if args.overrides or args.config or args.env or args.out or args.samples:
        raise ConfigError("--resume DIR takes the sweep saved in DIR; drop the overrides, "
                          "--config, --env, --out and --samples")
    if read_saved_sweep(Path(args.resume)) is None and (Path(args.resume) / "config.yaml"
                                                        ).exists():
        raise ConfigError(f"{args.resume} holds a run, not a sweep; continue it with: "
                          f"jaxwarp train --resume {args.resume}")
    return args.resume, None, None


def _report(result: Any, threshold: float | None) -> int:
    """The summary line and, for a finished sweep, the ranked table (process 0
    alone writes and prints the report: `summary["sweep"]`)."""
    from jaxwarp.run.sweep_report import BEST_YAML, format_table, ranked_metric, write_report
    from jaxwarp.units import rate_text

    s, out = result.summary, Path(result.out_dir)
    rate = rate_text(s["env_steps_per_s"], s.get("agents_per_env"), s.get("device"))
    print(f"{s['updates']}/{s['num_updates']} updates of {s['settings']} settings x "
          f"{s['seeds']} seed(s); {rate} (compile {s['compile_s']:.1f} s)")
    if "sweep" not in s:
        return 0
    rep = s["sweep"]
    if threshold is not None:  # ranked again, the crossing of this threshold timed
        from jaxwarp.run.checkpoint import read_saved_config, read_saved_sweep

        config, _ = read_saved_config(out)
        settings = read_saved_sweep(out).settings()
        rep = write_report(out, config, settings, ranked_metric(config, _groups(result)),
                           threshold)
    print(format_table(rep["ranked"], rep["keys"], rep["metric"], rep["threshold"]))
    print(f"outputs in {out}; the best setting: jaxwarp train --config {out / BEST_YAML}")
    return 0


def _groups(result: Any) -> list[str]:
    return list(result.state.learner.params)
