"""``jaxwarp`` command line.

    jaxwarp train [--env NAME] [--config FILE_OR_NAME] [key=value ...]
                  [--seeds S] [--devices N] [--out DIR] [--resume DIR] [--no-progress]
    jaxwarp sweep [--config ...] key=a,b,c [key=uniform(lo,hi) --samples N] [--seeds S]
                             # settings x seeds in one program, ranked (cli_sweep.py)
    jaxwarp eval --run DIR [--episodes N] [--seed S] [--json FILE]
                             # trained policies of a run against random ones
    jaxwarp render (--env NAME [env_module=PATH] | --run DIR) [--steps T] [--out FILE.gif]
    jaxwarp configs          # list the shipped training configs
    jaxwarp build [--backend cpu|cuda|all] [ENV ...]   # build contract envs into the cache now
                             # (cuda needs a GPU or JAXWARP_CUDA_ARCH, e.g. 90)
    jaxwarp build [ENV ...] --emit DIR   # write the generated <env>_layout.h, don't compile

Overrides use the config's keys, nested with dots:
``num_envs=2000 policies.tagger.lr=1e-3 env_params.grid_length=40``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jaxwarp
from jaxwarp.cli_args import add_run_arguments
from jaxwarp.cli_sweep import add_sweep, sweep
from jaxwarp.errors import CheckpointWarning, ConfigError, RunError
from jaxwarp.info import format_report, report
from jaxwarp.run.signals import CtrlC
from jaxwarp.units import rate_text

# Nothing heavy at module level (jax, numpy, the envs): the console script
# imports this module before `main` runs, and `main` is where Ctrl-C is
# handled, so every heavy import happens inside it. `jaxwarp.run.loop` is
# also looked up when a run starts, where tests replace its `train_run`.


DESCRIPTION = ("jaxwarp command line: train policies on jaxwarp envs, evaluate and render "
               "them, list the shipped configs and the envs, build envs.")


class _IntermixedParser(argparse.ArgumentParser):
    """A subcommand's parser whose positionals (``key=value`` overrides, env
    names) may come before, between and after its flags, as Hydra-style
    overrides do: ``train --env cartpole num_envs=8 --no-progress seed=3``.

    argparse fills a ``nargs="*"`` positional from one run of consecutive
    strings only; `parse_known_intermixed_args` collects them all. The top
    parser cannot use it (subparsers are a positional), so each subcommand's
    parser does, once: the guard lets the intermixed parse call the plain one.
    """

    _intermixed = False

    def parse_known_args(self, args=None, namespace=None):
        if self._intermixed:
            return super().parse_known_args(args, namespace)
        self._intermixed = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixed = False


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jaxwarp", description=DESCRIPTION)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_IntermixedParser)
    _add_train(sub)
    add_sweep(sub)
    sub.add_parser("configs", help="list the shipped training configs, one line each")
    sub.add_parser("envs", help="list the registered envs, one line each: agents, the "
                   "backends that run them here, what they are")
    sub.add_parser("info", help="versions, devices, backends, prebuilt libraries, compilers "
                   "and the cache folder: what a bug report needs")
    _add_build(sub)
    _add_render(sub)
    _add_eval(sub)
    return p


def _add_train(sub: Any) -> None:
    t = sub.add_parser("train", help="train policies on an env (PPO or A2C, one jitted program)",
                       description="Trains the policies of an env's groups and writes metrics, "
                       "checkpoints, a learning curve and (when finished) an evaluation "
                       "against random policies to the output folder (TensorBoard logs too "
                       "with tensorboardX: pip install jaxwarp[train]). Ctrl-C stops at the "
                       "end of the current chunk of updates and saves a checkpoint there "
                       "(Ctrl-C again stops at once; during the compile: right after it); "
                       "--resume DIR goes on from it.")
    add_run_arguments(t, "config overrides, anywhere among the flags, e.g. num_envs=64 "
                      "policies.tagger.lr=1e-3",
                      "continue the run saved in DIR (with total_env_steps=N: up to a new, "
                      "larger total; a finished run: make the outputs of its end it lacks)")
    t.add_argument("--devices", type=int, metavar="N",
                   help="local devices to split the envs over (same as devices=N; default: "
                   "every local device)")
    t.add_argument("--eval-episodes", type=int, default=None, metavar="N",
                   help="after a finished run: episodes per matchup of `jaxwarp eval` (trained "
                   "vs random, printed and saved as eval.json) and a GIF of the trained "
                   "policies beside random ones; 0 skips both (default 128; with --resume: "
                   "the run's own, kept in its config.yaml)")


def _add_build(sub: Any) -> None:
    b = sub.add_parser("build", help="build envs written through the authoring contract "
                       "(default: all built-ins) into the cache, so first use is instant")
    b.add_argument("envs", nargs="*", metavar="ENV")
    b.add_argument("--backend", default="all", choices=("cpu", "cuda", "all"),
                   help="all: cpu, plus cuda when nvcc is found")
    b.add_argument("--emit", metavar="DIR",
                   help="write each env's generated layout header (Params, State, the Env "
                   "traits; the same text for cpu and cuda) to DIR as <env>_layout.h, the file "
                   "that the checked-in ffi/env_ffi.cc compiles as env_layout.h; print the "
                   "paths, without compiling")


def _add_render(sub: Any) -> None:
    r = sub.add_parser("render", help="write a GIF of an env: random actions (--env), or a "
                       "run's trained policies beside random ones (--run)",
                       description="Rolls out one env and writes env 0's frames as a GIF, then "
                       "prints its path. --env NAME: uniformly random actions. --run DIR: the "
                       "run's trained policies (newest intact checkpoint) on the left, random "
                       "policies from the same start on the right.")
    r.add_argument("env_module", nargs="*", metavar="env_module=PATH",
                   help="with --env: a .py file or module to import first, registering an "
                   "env of your own (as train's env_module=; installed packages' entry "
                   "points need none)")
    r.add_argument("--env", help="env name (random actions)")
    r.add_argument("--run", metavar="DIR", help="a training run folder (trained vs random)")
    r.add_argument("--config", help="the env's named configuration, e.g. warpdrive_default")
    r.add_argument("--steps", type=int, default=None,
                   help="steps (frames: steps + 1); default: one episode")
    r.add_argument("--out", help="GIF path (default <env>.gif)")
    r.add_argument("--backend", default="auto", help="auto, cuda, cpu or jax")
    r.add_argument("--fps", type=float, default=20.0)
    r.add_argument("--size", type=int, default=GIF_PANEL_PX,
                   help=f"frame width and height in pixels (default {GIF_PANEL_PX}, as the "
                        "GIF a finished run writes)")
    r.add_argument("--seed", type=int, default=0, help="PRNG seed, in [0, 2**31)")


def _add_eval(sub: Any) -> None:
    e = sub.add_parser("eval", help="trained policies of a run against random ones",
                       description="Loads the newest intact checkpoint of a run and plays "
                       "whole episodes with each policy group trained or uniformly random (all "
                       "trained, all random, and each group trained against random others); "
                       "prints one line per group (trained vs random, gain with 95% CI) and "
                       "writes the figures as JSON (default DIR/eval.json).")
    e.add_argument("--run", metavar="DIR", required=True, help="a training run folder")
    e.add_argument("--episodes", type=int, default=256, help="episodes per matchup")
    e.add_argument("--seed", type=int, default=0,
                   help="evaluation seed (env starts, actions), in [0, 2**31)")
    e.add_argument("--seed-index", type=int, default=None,
                   help="one of the run's trained seeds (runs with --seeds S); "
                        "default: every seed and the seeds pooled")
    e.add_argument("--json", metavar="FILE", help="JSON output (default DIR/eval.json)")


# An error line's length at most: messages quote bounded values, and this keeps
# any other message (an exception's text) to one readable line.
MESSAGE_LIMIT = 2000


# A failed env build's compiler output, after the error line: at most this
# many lines, each at most COMPILER_LINE_LIMIT characters.
COMPILER_LINES = 40
COMPILER_LINE_LIMIT = 300


def _fail(command: str, msg: Any) -> int:
    """Prints the one error line ``jaxwarp CMD: error: ...`` (a message's
    lines joined) and returns 2; after a failed env build (an EnvBuildError of
    several lines: its first line, then the compiler's output) the compiler's
    own lines follow it, indented (`_compiler_lines`)."""
    first, rest = str(msg), ""
    if isinstance(msg, Exception) and "\n" in first:
        from jaxwarp.authoring import EnvBuildError

        if isinstance(msg, EnvBuildError):
            first, _, rest = first.partition("\n")
    text = " ".join(first.split())
    if len(text) > MESSAGE_LIMIT:
        text = text[:MESSAGE_LIMIT - 3] + "..."
    print(f"jaxwarp {command}: error: {text}", file=sys.stderr)
    for line in _compiler_lines(rest):
        print(line, file=sys.stderr)
    return 2


def _compiler_lines(text: str) -> list[str]:
    """A compiler's output as printed under the error line: indented by two
    spaces, blank lines at either end dropped, at most COMPILER_LINES lines of
    at most COMPILER_LINE_LIMIT characters (then how many lines were left out)."""
    lines = text.strip("\n").splitlines()
    shown = [("  " + ln.rstrip())[:COMPILER_LINE_LIMIT].rstrip() for ln in lines[:COMPILER_LINES]]
    if len(lines) > COMPILER_LINES:
        shown.append(f"  ... {len(lines) - COMPILER_LINES} more lines of compiler output")
    return shown


def _eval(args: argparse.Namespace) -> int:
    from jaxwarp.train.config import SEED_LIMIT

    if args.episodes < 2:
        return _fail("eval", f"--episodes must be >= 2; got {args.episodes}")
    if not 0 <= args.seed < SEED_LIMIT:
        return _fail("eval", f"--seed must be in [0, 2**31); got {args.seed}")
    from jaxwarp.authoring import EnvBuildError
    from jaxwarp.run.evaluate import evaluate_run, seed_lines, summary_line
    from jaxwarp.storage import atomic_write

    path = Path(args.json) if args.json else Path(args.run) / "eval.json"
    if args.json and not path.parent.is_dir():  # before the evaluation, not after it
        return _fail("eval", f"--json {args.json}: the folder {path.parent} does not exist")
    if path.is_dir():
        return _fail("eval", f"--json {args.json}: is a folder; give a file name")
    try:
        _import_run_env_module(Path(args.run))
        result = evaluate_run(args.run, episodes=args.episodes, seed=args.seed,
                              seed_index=args.seed_index)
        # A --json link the user made is followed (its file is replaced); a link
        # in the run folder is replaced itself, never written through.
        atomic_write(os.path.realpath(path) if args.json else path,
                     json.dumps(result, indent=2))
    except (ConfigError, ValueError, TypeError, OSError, RunError, EnvBuildError) as e:
        return _fail("eval", e)
    for line in seed_lines(result):
        print(line)
    print(summary_line(result))
    print(f"figures in {path}")
    return 0


# The frames of `jaxwarp render` at most, in bytes (--steps x the frame's size):
# they are all kept in memory until the GIF is written.
RENDER_BYTES_LIMIT = 2 << 30


def _sweep(args: argparse.Namespace) -> int:
    """`jaxwarp sweep` (jaxwarp/cli_sweep.py), its bad input in one line (exit 2)."""
    from jaxwarp.authoring import EnvBuildError

    try:
        return sweep(args)
    except (ConfigError, FileExistsError, FileNotFoundError, ValueError, RunError,
            EnvBuildError) as e:
        return _fail("sweep", e)


def _render(args: argparse.Namespace) -> int:
    from jaxwarp.train.config import SEED_LIMIT

    def fail(msg: Any) -> int:
        return _fail("render", msg)

    if bool(args.env) == bool(args.run):
        return fail("give either --env NAME (random actions) or --run DIR (trained policies)")
    if args.run and args.config:
        return fail("--config goes with --env; a run's env comes from its saved config")
    modules = []
    for item in args.env_module:
        key, eq, value = item.partition("=")
        if key.strip() != "env_module" or not eq or not value.strip():
            return fail(f"{item[:200]!r}: render takes no key=value but env_module=PATH.py "
                        "(or a module name), with --env")
        modules.append(value.strip())
    if modules and args.run:
        return fail("env_module= goes with --env; a run's env_module comes from its saved "
                    "config")
    if args.steps is not None and args.steps < 0:
        return fail(f"--steps must be >= 0; got {args.steps}")
    if not 0 <= args.seed < SEED_LIMIT:
        return fail(f"--seed must be in [0, 2**31); got {args.seed}")
    if not 8 <= args.size <= 2048:  # a frame is size x 2*size pixels per step, in memory
        return fail(f"--size must be in [8, 2048]; got {args.size}")
    most = max(RENDER_BYTES_LIMIT // (3 * 2 * args.size**2), 1)
    if args.steps is not None and args.steps > most:
        return fail(f"--steps must be at most {most:,} at --size {args.size} (every frame, "
                    f"{args.size} x {2 * args.size} pixels, is kept in memory: "
                    f"{RENDER_BYTES_LIMIT >> 30} GiB at most); got {args.steps:,}")
    if not args.fps > 0:
        return fail(f"--fps must be > 0; got {args.fps}")

    from jaxwarp.authoring import EnvBuildError
    from jaxwarp.render import write_gif

    try:
        if args.run:
            from jaxwarp.run.evaluate import load_run, render_run

            _import_run_env_module(Path(args.run))
            frames = render_run(load_run(args.run), args.steps, args.size, args.seed)
            default = Path(args.run) / "trained_vs_random.gif"
        else:
            for module in modules:
                _import_env_module(module)
            env = jaxwarp.make(args.env, backend=args.backend, config=args.config)
            frames = _random_frames(env, args)
            default = Path(f"{args.env}.gif")
        # (as eval's --json: a link given as --out is followed, one in a run folder not)
        path = write_gif(frames, os.path.realpath(args.out) if args.out else default,
                         fps=args.fps)
    except (ConfigError, ValueError, TypeError, OSError, RuntimeError, EnvBuildError) as e:
        return fail(e)
    print(path)
    return 0


def _random_frames(env: Any, args: argparse.Namespace) -> Any:
    """`jaxwarp render --env`'s frames: one env at random, each frame under a
    header naming the env, the step, the episode and each group's score, and
    the colours' legend."""
    import jax
    import numpy as np

    from jaxwarp.render import legend, render_frames, rollout_states
    from jaxwarp.run.evaluate import label_panels, score_lines
    from jaxwarp.train.policy import Groups

    states = rollout_states(env, jax.random.key(args.seed), 1, args.steps)
    frames = np.asarray(jax.jit(lambda s: render_frames(env, s, size=args.size))(states))
    groups = Groups.of(env).ids
    # The env's name on a line of its own: a long name and "random actions" on
    # one line were cut off at the panel's edge.
    return label_panels(frames, [[args.env, "random actions", *score_lines(states, groups, t)]
                                 for t in range(frames.shape[0])], legend(env, states))


def _emit(names: list[str], backend: str, out: str) -> int:
    """`jaxwarp build --emit DIR`: the generated part of what `_build` would
    compile, each env's layout header (same generator,
    `authoring.generated_source`), written out as DIR/<env>_layout.h; its
    paths on stdout, and on stderr the checked-in file that compiles them.
    Nothing compiled."""
    from jaxwarp import authoring

    texts: list[tuple[str, str]] = []  # (file name, source)
    try:
        for n in names:
            # One text for both platforms (g++ or nvcc picks the code path).
            text = authoring.generated_source(jaxwarp.make(n, backend="jax"),
                                              "cuda" if backend == "cuda" else "cpu")
            texts.append((f"{n}_layout.h", text))
    except (authoring.EnvBuildError, ValueError) as e:
        print(f"jaxwarp build: error: {e}", file=sys.stderr)
        return 2
    folder = Path(out)
    paths = []
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in texts:
            (folder / name).write_text(text)
            paths.append(folder / name)
    except OSError as e:
        print(f"jaxwarp build: error: --emit {out}: cannot write there ({e.strerror or e})",
              file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    print(f"jaxwarp build: each env's library is {authoring.FFI_DIR / authoring.FFI_SOURCE} "
          f"compiled with its layout as {authoring.LAYOUT_NAME}", file=sys.stderr)
    return 0


def _build(names: list[str], backend: str, emit: str | None = None) -> int:
    from jaxwarp import authoring
    from jaxwarp.authoring import build
    from jaxwarp.registry import contract_envs

    contract = list(contract_envs())
    names = names or contract
    for n in names:
        if n not in contract:
            print(f"jaxwarp build: error: {n!r} is not an env built through the authoring "
                  f"contract; those are {contract}", file=sys.stderr)
            return 2
    if emit is not None:
        return _emit(names, backend, emit)
    platforms = ["cpu", "cuda"] if backend == "all" else [backend]
    if backend == "all":  # cuda only where nvcc and a target architecture are known
        try:
            build.find_nvcc()
            build.gpu_arch()
        except authoring.EnvBuildError:
            platforms = ["cpu"]
    for n in names:
        for platform in platforms:
            t = time.perf_counter()
            try:
                env = jaxwarp.make(n, backend="jax")
                spec = env.spec
                lib = build.compile_library(spec, Path(spec.header), platform, params=env.params)
            except authoring.EnvBuildError as e:
                return _fail("build", e)
            print(f"{n:20s} {platform:4s} {time.perf_counter() - t:6.1f} s  {lib}")
    return 0


COMMANDS = ("train", "sweep", "eval", "render", "configs", "envs", "info", "build")


def main(argv: list[str] | None = None) -> int:
    """The `jaxwarp` command; returns the exit status (2: a usage error, 130:
    interrupted)."""
    words = [a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")]
    name = f"jaxwarp {words[0]}" if words and words[0] in COMMANDS else "jaxwarp"
    try:
        _EARLY.install()  # first, before any heavy import
        status = _main(argv)
        _EARLY.release(check=status != 130)  # a Ctrl-C swallowed on its way still stops
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        return status
    except KeyboardInterrupt:  # Ctrl-C outside a run's own handling (imports, eval)
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`jaxwarp configs | head -3`): stop quietly, as
        # Unix tools do, instead of a traceback (and another one at exit).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    finally:
        _EARLY.release(check=False)


# Ctrl-C from `main`'s first line (the heavy imports: jax, the envs, the user's
# modules) until a command's own handling takes over (train_run's; released
# first): KeyboardInterrupt at once, remembered when raised inside a gc
# callback of jax (which Python only reports and goes on), so that it still
# stops the command.
_EARLY = CtrlC()


def _load_plugins(command: str) -> int | None:
    """The installed packages' envs and models (entry points, `jaxwarp.plugins`);
    an exit status when one fails to load."""
    from jaxwarp.plugins import PluginError, load_plugins

    try:
        load_plugins()
    except (PluginError, TypeError, ValueError) as e:
        return _fail(command, e)
    return None


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    if args.command in ("train", "sweep", "eval", "render", "envs"):
        failed = _load_plugins(args.command)
        if failed is not None:
            return failed
    return _RUN[args.command](args)


def _configs(args: argparse.Namespace) -> int:
    """`jaxwarp configs`: one line per shipped config."""
    from jaxwarp.train.config import config_description, shipped_configs

    names = shipped_configs()
    width = max(map(len, names), default=0)
    for name in names:
        print(f"{name:{width}}  {config_description(name)}".rstrip())
    return 0


def _envs(args: argparse.Namespace) -> int:
    """`jaxwarp envs`: one line per registered env (installed packages' too)."""
    from jaxwarp.env_table import env_rows, format_env_rows

    print(format_env_rows(env_rows()))
    return 0


def _info(args: argparse.Namespace) -> int:
    print(format_report(report()))
    return 0


def _train(args: argparse.Namespace) -> int:
    """`jaxwarp train`: a new run, or `--resume DIR` (`_resume`); then the summary
    line and, for a finished run, the evaluation (`_after_run`)."""
    from jaxwarp.authoring import EnvBuildError
    from jaxwarp.run.loop import train_run

    if args.eval_episodes is not None and args.eval_episodes < 0:
        return _fail("train", f"--eval-episodes must be >= 0 (0 skips the evaluation); got "
                     f"{args.eval_episodes}")
    out = None
    progress = "lines" if args.no_progress else True  # a line per chunk without the bar
    with _one_line_checkpoint_warnings():
        try:
            if args.resume:
                out = args.resume
                return _resume(args, progress)
            config = _new_config(args)
            out = args.out or f"runs/{config.env}-{time.strftime('%Y%m%d-%H%M%S')}"
            episodes = DEFAULT_EVAL_EPISODES if args.eval_episodes is None \
                else args.eval_episodes
            _EARLY.release(check=True)  # train_run handles Ctrl-C from here on
            result = train_run(config, out, seeds=args.seeds, progress=progress,
                               after_training={"eval_episodes": episodes})
        except (ConfigError, FileExistsError, FileNotFoundError, ValueError, RunError,
                EnvBuildError) as e:
            return _fail("train", e)
        except KeyboardInterrupt:
            # One line, not a traceback: where the run stands and how to go on.
            print(f"jaxwarp train: interrupted; {_where_it_stands(out)}", file=sys.stderr)
            return 130
    return _after_run(result, episodes)


# --eval-episodes of a run that never gave it.
DEFAULT_EVAL_EPISODES = 128


def _resume(args: argparse.Namespace, progress: bool | str) -> int:
    """`jaxwarp train --resume DIR`: the rest of the run's updates (up to a new
    total_env_steps=N), then `_after_run`; for a run whose updates are all
    done, the after-training outputs it lacks (`_finish_outputs`), or a note
    that it is complete."""
    from jaxwarp.run.checkpoint import read_after_training, read_saved_sweep
    from jaxwarp.run.loop import train_run

    out = Path(args.resume)
    if read_saved_sweep(out) is not None:
        raise ConfigError(f"{out} holds a sweep; continue it with: jaxwarp sweep --resume {out}")
    config = _resume_config(args)
    if config is not None:
        _check_update_count(config)
    _import_run_env_module(out)
    given = args.eval_episodes
    episodes = given if given is not None else \
        read_after_training(out).get("eval_episodes", DEFAULT_EVAL_EPISODES)
    summary = _finished(out)
    if summary is not None and config is None:
        done = f"{summary['updates']}/{summary['num_updates']} updates"
        if not _outputs_missing(out, summary, episodes):
            print(f"jaxwarp train: {out} is already finished ({done}) with its outputs; "
                  f"nothing to resume (jaxwarp eval --run {out} evaluates it; "
                  "total_env_steps=N extends it)", file=sys.stderr)
            return 0
        print(f"jaxwarp train: {out} is finished ({done}); making the outputs of its end: "
              "learning curve, evaluation, GIF", file=sys.stderr)
        _EARLY.release(check=True)  # as for a run: Ctrl-C handled by the steps
        return _finish_outputs(out, episodes)
    _EARLY.release(check=True)  # train_run handles Ctrl-C from here on
    result = train_run(config, out, resume=True, progress=progress, devices=args.devices,
                       after_training=None if given is None else {"eval_episodes": given})
    return _after_run(result, episodes)


def _where_it_stands(out: str | None) -> str:
    """After Ctrl-C: the newest checkpoint and what `--resume` will do from it."""
    from jaxwarp.run.checkpoint import checkpoint_steps, read_saved_config
    from jaxwarp.train.config import derived

    steps = checkpoint_steps(Path(out)) if out else []
    if not steps:
        return "no checkpoint was written yet"
    where = f"last checkpoint: update {steps[0]} in {Path(out) / 'checkpoints'}"
    try:
        total = derived(read_saved_config(Path(out))[0]).num_updates
    except ConfigError:
        total = None
    if steps[0] == total:
        return (f"{where}, the last of the run's {total}; jaxwarp train --resume {out} "
                "makes the outputs of its end (learning curve, evaluation, GIF)")
    return f"{where}; continue with: jaxwarp train --resume {out}"


@contextlib.contextmanager
def _one_line_checkpoint_warnings() -> Iterator[None]:
    """Within the block, a CheckpointWarning is one line on stderr (`jaxwarp
    train: warning: ...`); other warnings as Python shows them."""
    default_showwarning = warnings.showwarning

    def one_line_warning(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, CheckpointWarning):
            print(f"jaxwarp train: warning: {message}", file=sys.stderr)
        else:
            default_showwarning(message, category, filename, lineno, file, line)

    warnings.showwarning = one_line_warning
    try:
        yield
    finally:
        warnings.showwarning = default_showwarning


def _resume_config(args: argparse.Namespace) -> Any:
    """--resume DIR, with none of the flags that a resumed run takes from its
    folder: None, or the saved config with a new total_env_steps (the one
    override a resume takes: an extension, checked by the run)."""
    from jaxwarp.params_check import quoted
    from jaxwarp.run.checkpoint import CONFIG_FILE, read_saved_config
    from jaxwarp.train.config import config_from_dict, parse_override

    if args.config or args.env or args.out:
        raise ConfigError("--resume DIR takes the run's saved config; drop --env, "
                          "--config and --out (--devices N may change the device count, "
                          "total_env_steps=N may extend the run)")
    for o in args.overrides:
        key = o.partition("=")[0].strip()
        if key != "total_env_steps":
            raise ConfigError(f"--resume DIR takes the run's saved config; {quoted(key)} "
                              "cannot change on resume: only total_env_steps=N may (to "
                              "extend the run)")
    if not args.overrides or not (Path(args.resume) / CONFIG_FILE).exists():
        return None  # (without config.yaml the run says that it is not a run)
    saved, _ = read_saved_config(Path(args.resume))
    config = config_from_dict(parse_override(args.overrides[-1]), base=saved)
    return None if config == saved else config


def _new_config(args: argparse.Namespace) -> Any:
    """The TrainConfig of a new run: --config (or --env's shipped config), then
    --env, the key=value overrides and --devices; --seeds checked against it."""
    from jaxwarp.train.config import default_config_for
    from jaxwarp.train.seeds import check_seeds

    overrides = list(args.overrides)
    if args.env:
        _check_one_env(args.env, overrides)
        overrides.insert(0, f"env={args.env}")
    if args.devices is not None:
        overrides.append(f"devices={args.devices}")
    source = args.config
    if source is None and args.env and default_config_for(args.env):
        source = default_config_for(args.env)
        print(f"{args.env}: starting from the shipped config {source} (--config picks "
              "another; jaxwarp configs lists them)")
    config = _load_config(source, overrides)
    _check_update_count(config)
    if config.env_module:
        _import_env_module(config.env_module)
    try:
        check_seeds(config.seed, args.seeds)
    except ValueError as e:  # "seeds ..." -> "--seeds ..."
        raise ConfigError(f"--{e}") from None
    return config


def _load_config(source: str | None, overrides: list[str]) -> Any:
    """`load_config`, with a --config file read no further than its size limit
    (a stat says 0 bytes for /dev/zero or a pipe) and YAML nested past
    Python's recursion limit refused in one line naming the file or override."""
    from jaxwarp.params_check import quoted
    from jaxwarp.storage import read_at_most
    from jaxwarp.train.config import CONFIG_FILE_LIMIT, load_config, parse_override

    if source is not None and Path(source).exists():
        with contextlib.suppress(OSError):  # (load_config says why it cannot read it)
            if len(read_at_most(source, CONFIG_FILE_LIMIT)) > CONFIG_FILE_LIMIT:
                raise ConfigError(f"config {source!r}: over {CONFIG_FILE_LIMIT:,} bytes; a "
                                  f"config file is at most {CONFIG_FILE_LIMIT:,} bytes")
    try:
        return load_config(source, overrides)
    except RecursionError:
        for o in overrides:
            try:
                parse_override(o)
            except RecursionError:
                raise ConfigError(f"override {quoted(o)}: nested too deeply") from None
            except ConfigError:
                pass
        raise ConfigError(f"config {source!r}: nested too deeply (a config is a few levels "
                          "of mappings)") from None


# Updates of a run at most: the update counter is a 32-bit integer on the device,
# as is the step count of the learning-rate schedule (updates x optimiser steps).
UPDATE_COUNT_LIMIT = 2**31 - 1


def _check_update_count(config: Any) -> None:
    """ConfigError naming total_env_steps when the run's updates (times the
    optimiser steps of each) would overflow the device's 32-bit counters."""
    from jaxwarp.params_check import quoted
    from jaxwarp.train.config import derived

    d = derived(config)
    if d.num_updates * d.optimizer_steps > UPDATE_COUNT_LIMIT:
        most = UPDATE_COUNT_LIMIT // d.optimizer_steps * d.batch_env_steps
        raise ConfigError(f"total_env_steps={quoted(config.total_env_steps)} is invalid; "
                          f"expected at most {most:,} with these num_envs, num_steps and "
                          f"optimiser steps per update ({d.optimizer_steps}): the update "
                          "counters are 32-bit integers")


def _import_env_module(name: str) -> None:
    """Imports a user's env module (`import_env_module`); whatever it raises
    on import (an error of its own, a syntax error, endless recursion) is a
    one-line ConfigError naming env_module and where in the module."""
    import traceback

    from jaxwarp.train.trainer import import_env_module

    before = set(sys.modules)
    try:
        import_env_module(name)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's code: anything, in one line
        for half_made in set(sys.modules) - before:  # as Python drops a failed import's
            del sys.modules[half_made]
        if isinstance(e, SyntaxError):
            where = f" ({e.filename}, line {e.lineno})"
        else:
            frames = traceback.extract_tb(e.__traceback__)
            own = [f for f in frames if "importlib" not in f.filename
                   and not f.filename.startswith(str(Path(jaxwarp.__file__).parent))]
            where = f" ({own[-1].filename}, line {own[-1].lineno})" if own else ""
        text = str(e.msg if isinstance(e, SyntaxError) else e)[:300]
        raise ConfigError(f"env_module={name}: importing it raised {type(e).__name__}: "
                          f"{text}{where}") from None


def _import_run_env_module(out: Path) -> None:
    """The env_module of the run saved in out, imported by `_import_env_module`
    (nothing without one, or without config.yaml: the command says so)."""
    from jaxwarp.run.checkpoint import CONFIG_FILE, read_saved_config

    if (out / CONFIG_FILE).is_file():
        module = read_saved_config(out)[0].env_module
        if module:
            _import_env_module(module)


def _after_run(result: Any, eval_episodes: int) -> int:
    """The summary line of a run that ended; for a finished one, its
    evaluation (`_evaluate_finished`)."""
    s = result.summary
    rate = rate_text(s["env_steps_per_s"], s.get("agents_per_env"), s.get("device"))
    print(f"{s['updates']}/{s['num_updates']} updates, {s['env_steps_per_seed']:,} env-steps per "
          f"seed x {s['seeds']} seed(s); {rate} (compile {s['compile_s']:.1f} s); "
          f"final {s['final']}")
    if s["finished"]:
        status = _evaluate_finished(Path(result.out_dir), eval_episodes)
        if status:
            return status
    from jaxwarp.run.distributed import finish, is_primary

    if is_primary():
        print(f"outputs in {Path(result.out_dir)}")
    finish()
    return 0


def _evaluate_finished(out: Path, eval_episodes: int) -> int | None:
    """`_after_training` of a finished run, which Ctrl-C stops between steps
    (130); when it made every output, summary.json says so (`AFTER_TRAINING`),
    so that a resume knows that nothing is left to do."""
    if eval_episodes <= 0:
        return None
    from jaxwarp.errors import StorageError

    # Ctrl-C only noted: the evaluation compiles (no KeyboardInterrupt inside XLA).
    try:
        with CtrlC("jaxwarp: interrupt: stopping once the current step ends") as ctrl_c:
            complete = _after_training(out, eval_episodes, ctrl_c)
            if complete and not ctrl_c.pressed:
                _note_outputs_done(out, eval_episodes)
    except StorageError as e:  # the GIF or summary.json on a full disk: the run is kept
        return _fail("train", e)
    if ctrl_c.pressed:
        print(f"jaxwarp train: interrupted during the evaluation; the run's updates are "
              f"complete in {out} (jaxwarp train --resume {out} makes the evaluation and the "
              "GIF again)", file=sys.stderr)
        return 130
    return None


# The key of summary.json that says the outputs after training were all made.
AFTER_TRAINING = "after_training"


def _note_outputs_done(out: Path, eval_episodes: int) -> None:
    from jaxwarp.run.distributed import is_primary
    from jaxwarp.run.metrics import SUMMARY_FILE, write_summary
    from jaxwarp.storage import writing

    summary = _finished(out)
    if summary is not None and is_primary():
        with writing(out, SUMMARY_FILE):
            write_summary(out, summary | {AFTER_TRAINING: {"eval_episodes": eval_episodes}})


def _finished(out: Path) -> dict[str, Any] | None:
    """out's summary.json when it says the run is finished, else None."""
    from jaxwarp.run.metrics import SUMMARY_FILE

    try:
        s = json.loads((out / SUMMARY_FILE).read_text())
        if isinstance(s, dict) and s.get("finished") is True \
                and isinstance(s["updates"], int) and isinstance(s["num_updates"], int):
            return s
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return None


def _outputs_missing(out: Path, summary: dict[str, Any], eval_episodes: int) -> bool:
    """Whether a finished run lacks an output of its end: its learning curve
    (with matplotlib), or with eval_episodes > 0 the evaluation and GIF (made
    unless summary.json says so: `AFTER_TRAINING`; runs from before that key:
    an eval.json of the last update and the GIF)."""
    import importlib.util

    from jaxwarp.run.plot import PLOT_FILE

    if not (out / PLOT_FILE).exists() and importlib.util.find_spec("matplotlib"):
        return True
    if eval_episodes <= 0 or AFTER_TRAINING in summary:
        return False
    try:
        evaluated = json.loads((out / "eval.json").read_text())["update"] == summary["updates"]
    except (OSError, ValueError, KeyError, TypeError):
        evaluated = False
    return not (evaluated and (out / GIF_FILE).exists())


def _finish_outputs(out: Path, eval_episodes: int) -> int:
    """The outputs of a finished run's end that a Ctrl-C left unmade: the
    learning curve, then the evaluation and GIF (`_evaluate_finished`), under
    the run's lock."""
    from jaxwarp.run.lock import RunLock
    from jaxwarp.run.plot import PLOT_FILE, plot_run

    lock = RunLock(out)
    try:
        if not (out / PLOT_FILE).exists():
            plot_run(out)
        status = _evaluate_finished(out, eval_episodes)
    finally:
        lock.release()
    if status:
        return status
    print(f"outputs in {out}")
    return 0


def _check_one_env(env: str, overrides: list[str]) -> None:
    """ConfigError unless every ``env=NAME`` override names `env` (--env)."""
    from jaxwarp.params_check import quoted
    from jaxwarp.train.config import parse_override

    for o in overrides:
        key, _, value = o.partition("=")
        if key.strip() == "env":
            try:
                named = parse_override(o)["env"]
            except ConfigError:
                named = value
            if named != env:
                raise ConfigError(f"--env {env} and the override {quoted(o)} name different "
                                  "envs; give the env once")


def _after_training(out: Path, episodes: int, ctrl_c: Any = None) -> bool:
    """The trained policies against random ones (one line, eval.json, the
    random levels on the learning curve) and a GIF of them beside random
    ones. A failure here is a warning: the run itself is complete. Whether
    it made everything (an env without a drawing has no GIF to make)."""
    from jaxwarp.render import write_gif
    from jaxwarp.run.distributed import is_primary
    from jaxwarp.run.evaluate import evaluate_run, load_run, render_run, seed_lines, summary_line
    from jaxwarp.run.plot import plot_run
    from jaxwarp.storage import atomic_write, writing

    # Over several processes every process evaluates its own copy of the
    # policies on its own device (the same figures); process 0 alone writes
    # and prints them.
    primary = is_primary()
    try:
        result = evaluate_run(out, episodes=max(episodes, 2))
        run = load_run(out)
        if primary:
            kept = _bigger_eval(out / "eval.json", result)
            if kept:  # e.g. `jaxwarp eval --episodes 1024` of the same checkpoint
                print(f"eval.json of update {result['update']} with {kept} episodes kept (this "
                      f"evaluation: {result['episodes']})")
            else:
                atomic_write(out / "eval.json", json.dumps(result, indent=2))
            for line in seed_lines(result):
                print(line)
            print(summary_line(result))
            plot_run(out)  # redrawn with the random levels from eval.json
    except Exception as e:  # noqa: BLE001 - reported in one line, the run is saved
        print(f"jaxwarp train: warning: evaluation skipped: {' '.join(str(e).split())}",
              file=sys.stderr)
        return False
    if ctrl_c is not None and ctrl_c.pressed:
        return False
    try:
        frames = render_run(run, size=GIF_PANEL_PX)  # one episode
        if primary:
            with writing(out, GIF_FILE):  # a full disk: one line (StorageError)
                write_gif(frames, out / GIF_FILE)
    except ValueError as e:  # an env without a renderer
        print(f"jaxwarp train: warning: no GIF: {' '.join(str(e).split())}", file=sys.stderr)
    return True


# A panel's width and height in the GIF a finished run writes (two panels side by side).
GIF_PANEL_PX = 256

# The GIF of a finished run's trained policies beside random ones.
GIF_FILE = "trained_vs_random.gif"


def _bigger_eval(path: Path, result: dict[str, Any]) -> int | None:
    """The episodes of the evaluation in `path` when it is of the same update
    and seeds as `result` and has more episodes (worth keeping), else None."""
    try:
        old = json.loads(path.read_text())
        same = old["update"] == result["update"] and old.get("seeds", 1) == \
            result.get("seeds", 1)
        return int(old["episodes"]) if same and int(old["episodes"]) > result["episodes"] \
            else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


# What each command runs (`_main`).
_RUN = {
    "train": _train, "sweep": _sweep, "eval": _eval, "render": _render, "configs": _configs,
    "envs": _envs, "info": _info,
    "build": lambda args: _build(list(args.envs), args.backend, args.emit),
}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
