"""``jaxwarp`` command line.

    jaxwarp train [--env NAME] [--config FILE_OR_NAME] [key=value ...]
                  [--seeds S] [--out DIR] [--resume DIR] [--no-progress]
    jaxwarp configs          # list the shipped training configs
    jaxwarp build [--backend cpu|cuda|all] [ENV ...]   # build contract envs into the cache now
                             # (cuda needs a GPU or JAXWARP_CUDA_ARCH, e.g. 90)

Overrides use the config's keys, nested with dots:
``num_envs=2000 policies.tagger.lr=1e-3 env_params.grid_length=40``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

from jaxwarp.train.config import ConfigError, load_config, shipped_configs


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jaxwarp", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train policies on an env (PPO or A2C, one jitted program)")
    t.add_argument("overrides", nargs="*", metavar="key=value",
                   help="config overrides, e.g. num_envs=64 policies.tagger.lr=1e-3")
    t.add_argument("--env", help="env name (same as env=NAME)")
    t.add_argument("--config", help="YAML file, or a shipped config name "
                   f"({', '.join(shipped_configs())})")
    t.add_argument("--seeds", type=int, default=1, help="seeds trained together (vmap)")
    t.add_argument("--out", help="output folder (default runs/<env>-<time>)")
    t.add_argument("--resume", metavar="DIR", help="continue the run saved in DIR")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    sub.add_parser("configs", help="list the shipped training configs")
    b = sub.add_parser("build", help="build envs written through the authoring contract "
                       "(default: all built-ins) into the cache, so first use is instant")
    b.add_argument("envs", nargs="*", metavar="ENV")
    b.add_argument("--backend", default="all", choices=("cpu", "cuda", "all"),
                   help="all: cpu, plus cuda when nvcc is found")
    r = sub.add_parser("render", help="roll out an env with a random policy and write a GIF "
                       "(trained policies from a run folder are not supported yet)",
                       description="Rolls out one env with uniformly random actions and writes "
                       "env 0's frames as a GIF, then prints its path. Rendering a trained "
                       "policy from a run folder is not supported yet.")
    r.add_argument("--env", help="env name (required)")
    r.add_argument("--config", help="the env's named configuration, e.g. warpdrive_default")
    r.add_argument("--steps", type=int, default=100, help="steps (frames: steps + 1)")
    r.add_argument("--out", help="GIF path (default <env>.gif)")
    r.add_argument("--backend", default="auto", help="auto, cuda, cpu or jax")
    r.add_argument("--fps", type=float, default=20.0)
    r.add_argument("--size", type=int, default=128, help="frame width and height in pixels")
    r.add_argument("--seed", type=int, default=0)
    return p


def _render(args: argparse.Namespace) -> int:
    def fail(msg: str) -> int:
        print(f"jaxwarp render: error: {' '.join(str(msg).split())}", file=sys.stderr)
        return 2

    if not args.env:
        return fail("--env NAME is required")
    if args.steps < 0:
        return fail(f"--steps must be >= 0; got {args.steps}")
    if args.size < 8:
        return fail(f"--size must be >= 8; got {args.size}")
    if not args.fps > 0:
        return fail(f"--fps must be > 0; got {args.fps}")
    import jax

    import jaxwarp
    from jaxwarp.render import render_frames, rollout_states, write_gif

    try:
        env = jaxwarp.make(args.env, backend=args.backend, config=args.config)
        states = rollout_states(env, jax.random.key(args.seed), 1, args.steps)
        frames = jax.jit(lambda s: render_frames(env, s, size=args.size))(states)
        path = write_gif(frames, args.out or f"{args.env}.gif", fps=args.fps)
    except (ValueError, TypeError, OSError, RuntimeError) as e:
        return fail(e)
    print(path)
    return 0


def _build(names: list[str], backend: str) -> int:
    import time as _time
    from pathlib import Path as _Path

    import jaxwarp
    from jaxwarp import authoring
    from jaxwarp.registry import _REGISTRY

    contract = [n for n, (cls, _, _) in _REGISTRY.items()
                if isinstance(cls, type) and issubclass(cls, authoring.ContractEnv)]
    names = names or contract
    for n in names:
        if n not in contract:
            print(f"jaxwarp build: error: {n!r} is not an env built through the authoring "
                  f"contract; those are {contract}", file=sys.stderr)
            return 2
    platforms = ["cpu", "cuda"] if backend == "all" else [backend]
    if backend == "all":  # cuda only where nvcc and a target architecture are known
        try:
            authoring._find_nvcc()
            authoring._gpu_arch()
        except authoring.EnvBuildError:
            platforms = ["cpu"]
    for n in names:
        for platform in platforms:
            t = _time.perf_counter()
            try:
                env = jaxwarp.make(n, backend="jax")
                spec = env.spec
                lib = authoring._compile(spec, _Path(spec.header), platform, params=env.params)
            except authoring.EnvBuildError as e:
                print(f"jaxwarp build: error: {e}", file=sys.stderr)
                return 2
            print(f"{n:20s} {platform:4s} {_time.perf_counter() - t:6.1f} s  {lib}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "configs":
        for name in shipped_configs():
            print(name)
        return 0
    if args.command == "build":
        return _build(list(args.envs), args.backend)
    if args.command == "render":
        return _render(args)

    from jaxwarp.train.runner import CheckpointWarning, RunError, train_run

    def one_line_warning(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, CheckpointWarning):
            print(f"jaxwarp train: warning: {message}", file=sys.stderr)
        else:
            default_showwarning(message, category, filename, lineno, file, line)

    default_showwarning = warnings.showwarning
    warnings.showwarning = one_line_warning
    try:
        if args.resume:
            if args.overrides or args.config or args.env or args.out:
                raise ConfigError("--resume DIR takes the run's saved config; drop --env, "
                                  "--config, --out and key=value overrides")
            result = train_run(None, args.resume, resume=True, progress=not args.no_progress)
        else:
            overrides = list(args.overrides)
            if args.env:
                overrides.insert(0, f"env={args.env}")
            config = load_config(args.config, overrides)
            out = args.out or f"runs/{config.env}-{time.strftime('%Y%m%d-%H%M%S')}"
            result = train_run(config, out, seeds=args.seeds, progress=not args.no_progress)
    except (ConfigError, FileExistsError, FileNotFoundError, ValueError, RunError) as e:
        print(f"jaxwarp train: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    finally:
        warnings.showwarning = default_showwarning
    s = result.summary
    print(f"{s['updates']}/{s['num_updates']} updates, {s['env_steps_per_seed']:,} env-steps per "
          f"seed x {s['seeds']} seed(s); {s['env_steps_per_s']:,.0f} env-steps/s "
          f"(compile {s['compile_s']:.1f} s); final {s['final']}")
    print(f"outputs in {Path(result.out_dir)}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
