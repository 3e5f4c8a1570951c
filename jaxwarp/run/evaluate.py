"""Evaluate a training run's policies against random ones (``jaxwarp eval``).

`load_run` restores the newest intact checkpoint of a run folder;
`evaluate` plays whole episodes with each policy group either trained or
uniformly random:

* ``trained``: every group plays its trained policy;
* ``random``: every group acts uniformly at random (the reference level);
* ``<group> trained``: that group trained, every other group random (for
  Tag: trained taggers against random runners, and trained runners against
  random taggers), so each group's gain over random is measured against the
  same opponents.

Each matchup runs ``episodes`` envs from fresh resets with the same keys
(common random numbers: the starts are identical across matchups) for
`jaxwarp.core.episode_length(env)` steps, the most an episode lasts, and
records each env's first episode; the figures are means over those episodes
with a 95% confidence interval (1.96 standard errors). Should an episode not
finish in that many steps (an env whose stated length is wrong), `evaluate`
raises `EpisodesUnfinished` instead of reporting the zeros it started from.

A run trained with ``--seeds S`` holds S policies per group: `evaluate_seeds`
(or `evaluate_run` on the run folder) evaluates each seed as above and pools
them: figures over all S x episodes episodes, and each group's gain with the
95% interval of the mean over seeds (Student's t with S - 1 degrees of
freedom: the seeds are the independent training runs).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp.core import episode_length
from jaxwarp.sampler import sample_actions
from jaxwarp.train.seeds import member_keys


class EpisodesUnfinished(ValueError):
    """Some evaluated episodes did not finish within the steps rolled out
    (`jaxwarp.core.episode_length` of the env): their returns would be partial
    sums, or the zeros they started from, so `evaluate` reports none."""


@dataclasses.dataclass(frozen=True)
class LoadedRun:
    """A run's trainer (env, groups, models) and one seed's restored policies."""

    trainer: Any
    params: dict[str, Any]      # group -> Flax params
    obs_stats: dict[str, Any]   # group -> RunningStats ({} without normalize_obs)
    update: int                 # updates done at the checkpoint
    seed: int                   # the training seed these policies come from


def _restore(run_dir: str | Path):
    """(config, seeds, trainer, update, runner state with a leading seed axis)."""
    from jaxwarp.run.checkpoint import read_saved_config, read_saved_sweep, restore_intact
    from jaxwarp.run.distributed import is_primary
    from jaxwarp.run.sweep_report import best_setting
    from jaxwarp.train.config import setting_config
    from jaxwarp.train.trainer import build_trainer

    out = Path(run_dir)
    if not (out / "config.yaml").exists():
        raise FileNotFoundError(f"--run {out}: no config.yaml there (not a jaxwarp run)")
    config, seeds = read_saved_config(out)
    settings = read_saved_sweep(out)
    settings = settings.settings() if settings is not None else []
    # One device of this process: evaluation plays a few hundred envs; the
    # checkpoint's global arrays restore onto any device count, and after a run
    # over several processes each process restores its own copy (no array may
    # span another process's devices: the host reads every figure).
    trainer = build_trainer(dataclasses.replace(config, devices=1), local=True)
    keys = member_keys(config.seed, seeds, len(settings))
    here = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=here),
                            jax.eval_shape(jax.vmap(trainer.init), keys))
    # Read only: a run may be training in this folder (nothing moved, retried).
    restored = restore_intact(out, abstract, primary=is_primary(), read_only=True) \
        if (out / "checkpoints").exists() else None
    if restored is None:
        raise FileNotFoundError(f"--run {out}: no checkpoint to evaluate (the run saves one "
                                f"every {config.checkpoint_every} updates and at the end)")
    update, rs = restored
    if settings:  # a sweep: its best setting's seeds, with that setting's config
        k = best_setting(out, config, settings, list(trainer.groups))
        rs = jax.tree.map(lambda x: x[k * seeds:(k + 1) * seeds], rs)
        config = setting_config(config, settings[k])
    return config, seeds, trainer, int(update), rs


def _seed_run(config, trainer, update: int, rs, i: int) -> LoadedRun:
    params, stats = jax.tree.map(lambda x: x[i], (rs.learner.params, rs.learner.obs_stats))
    return LoadedRun(trainer=trainer, params=params, obs_stats=stats, update=update,
                     seed=config.seed + i)


def load_run(run_dir: str | Path, seed_index: int = 0) -> LoadedRun:
    """Restores the newest intact checkpoint of the run in `run_dir`.

    seed_index: which of the run's seeds (``--seeds S`` trains S at once).
    Raises FileNotFoundError when `run_dir` holds no run or no checkpoint.
    """
    config, seeds, trainer, update, rs = _restore(run_dir)
    if not 0 <= seed_index < seeds:
        raise ValueError(f"seed_index must be in [0, {seeds}) for this run; got {seed_index}")
    return _seed_run(config, trainer, update, rs, seed_index)


def load_runs(run_dir: str | Path) -> list[LoadedRun]:
    """Every seed of the run in `run_dir` (one restore): ``[load_run(run_dir,
    i) for i in range(seeds)]``."""
    config, seeds, trainer, update, rs = _restore(run_dir)
    return [_seed_run(config, trainer, update, rs, i) for i in range(seeds)]


class RunPolicy:
    """A run's policies as one actor for `play` and `jaxwarp.render.rollout_states`:
    ``actions, carry = policy(key, obs, state, carry, first)`` with obs
    f32[envs, agents, D], the env state, the recurrent groups' carry (start:
    ``policy.initial_carry(envs)``; ``{}`` for feed-forward models) and first
    bool[envs], the envs whose obs begins an episode (where carries reset);
    actions i32[envs, agents, heads] are drawn from the logits as in training.
    """

    def __init__(self, run: LoadedRun, trained: Mapping[str, bool]):
        self.run = run
        self.which = {g: bool(trained.get(g, False)) for g in run.trainer.groups}
        self.nvec = tuple(int(n) for n in run.trainer.env.action_space.nvec)

    def initial_carry(self, num_envs: int) -> dict[str, Any]:
        return self.run.trainer.policy.initial_carry(num_envs)

    def __call__(self, key: jax.Array, obs: jax.Array, state: Any, carry: Any,
                 first: jax.Array) -> tuple[jax.Array, Any]:
        t, run = self.run.trainer, self.run
        gstate = t.env.global_state(obs, state) if t.policy.critics else None
        carry, logits, _ = t.policy.step(run.params, run.obs_stats, obs, carry, first, gstate,
                                         self.which)
        actions, _ = sample_actions(key, logits, self.nvec, backend="jax")
        return actions, carry


def make_policy(run: LoadedRun, trained: Mapping[str, bool]) -> RunPolicy:
    """The run's policies as a `RunPolicy`. trained: group -> True for its
    trained policy (sampled from its logits, as in training), False for
    uniformly random actions."""
    return RunPolicy(run, trained)


def play(run: LoadedRun, trained: Mapping[str, bool], episodes: int, seed: int
         ) -> dict[str, np.ndarray]:
    """First-episode figures of `episodes` envs: name -> f64[episodes].

    Names: ``<group>/return`` (mean over the group's agents) and the env's
    episode metrics (e.g. Tag's ``tags``); ``finished``: 1.0 where the env
    finished an episode within `jaxwarp.core.episode_length(env)` steps, the
    steps rolled out (always, for an env whose stated length is right; the
    figures of an unfinished episode stay 0). `evaluate` checks it.
    """
    t = run.trainer
    env, groups = t.env, t.groups
    policy = make_policy(run, trained)
    metrics_fn = getattr(env, "episode_metrics", None)
    steps = episode_length(env)

    @jax.jit
    def run_episodes(key):
        k_reset, key = jax.random.split(key)
        obs, state = env.reset(k_reset, episodes)
        zeros = jnp.zeros((episodes,), jnp.float32)
        names = list(jax.eval_shape(metrics_fn, jnp.zeros((episodes, env.num_agents))))\
            if metrics_fn is not None else []
        acc0 = {**{f"{g}/return": zeros for g in groups}, **{k: zeros for k in names}}
        mem0 = (policy.initial_carry(episodes), jnp.ones((episodes,), bool))

        def body(carry, k):
            obs, state, got, acc, (mem, first) = carry
            k_act, k_env = jax.random.split(k)
            actions, mem = policy(k_act, obs, state, mem, first)
            obs, state, _, done, info = env.step(k_env, state, actions)
            ret = info["episode_return"]
            first = done & ~got
            new = {f"{g}/return": jnp.take(ret, jnp.asarray(ids), axis=1).mean(axis=1)
                   for g, ids in groups.items()}
            if metrics_fn is not None:
                new.update(metrics_fn(ret))
            acc = {k: jnp.where(first, new[k].astype(jnp.float32), v) for k, v in acc.items()}
            return (obs, state, got | done, acc, (mem, done)), None

        (_, _, got, acc, _), _ = jax.lax.scan(
            body, (obs, state, jnp.zeros((episodes,), bool), acc0, mem0),
            jax.random.split(key, steps))
        return acc, got

    acc, got = jax.device_get(run_episodes(jax.random.PRNGKey(seed)))
    out = {k: np.asarray(v, np.float64) for k, v in acc.items()}
    out["finished"] = np.asarray(got, np.float64)
    return out


def _stat(x: np.ndarray) -> dict[str, float]:
    n = len(x)
    sem = float(np.std(x, ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    return {"mean": float(np.mean(x)), "ci95": 1.96 * sem}


def matchups(groups: Mapping[str, Any]) -> dict[str, dict[str, bool]]:
    """name -> group -> trained?: all trained, all random, and (with several
    groups) each group trained against random others."""
    names = list(groups)
    out = {"trained": {g: True for g in names}, "random": {g: False for g in names}}
    if len(names) > 1:
        for g in names:
            out[f"{g} trained"] = {h: h == g for h in names}
    return out


def _check_finished(run: LoadedRun, name: str, figs: Mapping[str, np.ndarray]) -> None:
    done = int(figs["finished"].sum())
    total = len(figs["finished"])
    if done < total:
        env = run.trainer.config.env
        steps = episode_length(run.trainer.env)
        raise EpisodesUnfinished(
            f"eval of {env}: only {done} of {total} episodes finished within the {steps} "
            f"steps rolled out (matchup {name!r}); jaxwarp.core.episode_length({env}) = "
            f"{steps} must be the most steps an episode lasts (the env's params."
            "max_episode_steps), so no figures are reported")


def _raw(run: LoadedRun, episodes: int, seed: int) -> dict[str, dict[str, np.ndarray]]:
    """matchup -> `play` figures; raises EpisodesUnfinished."""
    if episodes < 2:
        raise ValueError(f"episodes must be >= 2 (for a confidence interval); got {episodes}")
    raw = {name: play(run, which, episodes, seed)
           for name, which in matchups(run.trainer.groups).items()}
    for name, figs in raw.items():
        _check_finished(run, name, figs)
    return raw


def _gain_diffs(groups, raw) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """group -> (trained returns, random returns, paired differences), f64[episodes]."""
    out = {}
    for g in groups:
        mine = raw[f"{g} trained"] if len(groups) > 1 else raw["trained"]
        trained, rand = mine[f"{g}/return"], raw["random"][f"{g}/return"]
        out[g] = trained, rand, trained - rand
    return out


def _result(run: LoadedRun, raw, episodes: int, seed: int) -> dict[str, Any]:
    groups = run.trainer.groups
    result: dict[str, Any] = {
        "env": run.trainer.config.env, "update": run.update, "training_seed": run.seed,
        "eval_seed": seed, "episodes": episodes,
        "episode_length": episode_length(run.trainer.env),
        "matchups": {name: {k: _stat(v) for k, v in figs.items()} for name, figs in raw.items()},
        "gain": {}}
    for g, (trained, rand, diff) in _gain_diffs(groups, raw).items():
        d = _stat(diff)
        result["gain"][g] = {
            "trained": float(trained.mean()), "random": float(rand.mean()),
            "delta": d["mean"], "ci95": d["ci95"],
            "beats_random": bool(d["mean"] - d["ci95"] > 0)}
    return result


def evaluate(run: LoadedRun, episodes: int = 256, seed: int = 0) -> dict[str, Any]:
    """Every matchup of `matchups`; JSON-ready.

    Returns {"env", "update", "training_seed", "eval_seed", "episodes",
    "episode_length" (steps rolled out), "matchups": {name: {figure: {mean,
    ci95}}}, "gain": {group: {"trained", "random", "delta", "ci95",
    "beats_random"}}}: a group's gain compares its return trained vs random,
    the other groups random in both (all trained vs all random for a single
    group); the interval is that of the paired difference (same starts).

    Raises:
        ValueError: episodes < 2.
        EpisodesUnfinished: an episode of some matchup did not finish within
            the env's episode length (naming the env, the steps and the count).
    """
    return _result(run, _raw(run, episodes, seed), episodes, seed)


def _t95(n: int) -> float:
    """Two-sided 95% quantile of Student's t with n - 1 degrees of freedom."""
    from scipy import stats  # a dependency of jax

    return float(stats.t.ppf(0.975, n - 1))


def evaluate_seeds(runs: Sequence[LoadedRun], episodes: int = 256, seed: int = 0
                   ) -> dict[str, Any]:
    """Each seed's `evaluate` and the seeds pooled; JSON-ready.

    runs: the seeds of one run (`load_runs`), same update. Returns the keys of
    `evaluate` for the pool, plus "seeds" (S), "training_seeds", "per_seed"
    (each seed's `evaluate` result) and, per group of "gain", "interval":
    "matchups" are over all S x episodes episodes; "gain" is the mean of the
    seeds' gains with the 95% interval over seeds (Student's t, S - 1 degrees
    of freedom; "interval": "seeds"), or with one seed that seed's paired
    interval over episodes ("interval": "episodes").
    """
    if not runs:
        raise ValueError("evaluate_seeds: runs is empty; expected the seeds of one run "
                         "(load_runs)")
    if len({r.update for r in runs}) != 1:
        raise ValueError(f"evaluate_seeds: runs come from different updates "
                         f"{sorted({r.update for r in runs})}; expected one run's seeds")
    raws = [_raw(r, episodes, seed) for r in runs]
    per_seed = [_result(r, raw, episodes, seed) for r, raw in zip(runs, raws)]
    first, n = runs[0], len(runs)
    pooled_raw = {name: {k: np.concatenate([raw[name][k] for raw in raws]) for k in figs}
                  for name, figs in raws[0].items()}
    result = _result(first, pooled_raw, episodes, seed)
    del result["training_seed"]
    result.update(seeds=n, training_seeds=[r.seed for r in runs], per_seed=per_seed)
    for g, s in result["gain"].items():
        if n == 1:
            s.update(per_seed[0]["gain"][g], interval="episodes")
            continue
        deltas = np.array([p["gain"][g]["delta"] for p in per_seed])
        ci = _t95(n) * float(np.std(deltas, ddof=1)) / math.sqrt(n)
        s.update(delta=float(deltas.mean()), ci95=ci,
                 beats_random=bool(deltas.mean() - ci > 0), interval="seeds")
    return result


def evaluate_run(run_dir: str | Path, episodes: int = 256, seed: int = 0,
                 seed_index: int | None = None) -> dict[str, Any]:
    """`jaxwarp eval`'s figures for the run in `run_dir`: every seed and the
    pool (`evaluate_seeds`), or one seed (`evaluate`) where seed_index is set."""
    if seed_index is not None:
        return evaluate(load_run(run_dir, seed_index), episodes, seed)
    return evaluate_seeds(load_runs(run_dir), episodes, seed)


def summary_line(result: Mapping[str, Any]) -> str:
    """One line: each group's return trained vs random, with the gain's 95% CI
    (over seeds for a pooled `evaluate_seeds` result of several seeds)."""
    groups = result["gain"]
    parts = []
    for g, s in groups.items():
        vs = " (others random)" if len(groups) > 1 else ""
        verdict = "beats random" if s["beats_random"] else "not above random"
        parts.append(f"{g}: trained {s['trained']:.3g} vs random {s['random']:.3g}{vs}, "
                     f"gain {s['delta']:+.3g} ± {s['ci95']:.2g} ({verdict})")
    seeds = result.get("seeds", 1)
    pool = f" x {seeds} seeds (gain interval over seeds)" if seeds > 1 else ""
    return (f"{result['env']} update {result['update']}, {result['episodes']} episodes{pool}: "
            + "; ".join(parts))


def seed_lines(result: Mapping[str, Any]) -> list[str]:
    """One `summary_line` per seed of an `evaluate_seeds` result, each
    prefixed ``seed N:`` (the training seed); [] for a one-seed result."""
    per_seed = result.get("per_seed", [])
    if len(per_seed) < 2:
        return []
    return [f"seed {r['training_seed']}: {summary_line(r)}" for r in per_seed]


def render_run(run: LoadedRun, steps: int | None = None, size: int = 128, seed: int = 0,
               labels: bool = True) -> np.ndarray:
    """u8[steps + 1, header + size, 2 * size + gap, 3]: env 0 with the trained
    policies (left) and uniformly random ones (right), from the same start
    (same key). steps None: one episode, `jaxwarp.core.episode_length(env)`
    steps (see `jaxwarp.render.rollout_states`). labels: a header above each
    side (`label_panels`) naming it ("trained, seed S" / "random") with the step and
    each group's score so far (its agents' mean return this episode) and the
    colours' legend (`jaxwarp.render.legend`); False: no header (header 0).
    Raises ValueError for an env with no renderer."""
    from jaxwarp.render import legend, render_frames, rollout_states

    env, groups = run.trainer.env, run.trainer.groups
    key = jax.random.key(seed)
    draw = jax.jit(lambda s: render_frames(env, s, size=size))
    states = [rollout_states(env, key, 1, steps, make_policy(run, {g: on for g in groups}))
              for on in (True, False)]
    sides = [np.asarray(draw(s)) for s in states]
    if labels:
        colours = legend(env, states[0])
        sides = [label_panels(side, [[title] + score_lines(s, groups, t)
                                     for t in range(side.shape[0])], colours)
                 for side, s, title in zip(sides, states, (f"trained, seed {run.seed}",
                                                           "random"))]
    gap = np.full(sides[0].shape[:2] + (max(size // 32, 1), 3), 128, np.uint8)  # grey line
    return np.concatenate([sides[0], gap, sides[1]], axis=2)


def score_lines(states: Any, groups: Mapping[str, Sequence[int]], t: int) -> list[str]:
    """["step t", "episode k", "<group> <score>" ...] of env 0 at frame t:
    which episode it plays (counted from 1 where the state's ``timestep``
    restarts; absent without one) and the return of its current episode so
    far (mean over the group's agents; the state's ``episode_return``, where
    the env keeps one)."""
    lines = [f"step {t}"]
    clock = getattr(states, "timestep", None)
    if clock is not None:
        c = np.asarray(clock[: t + 1, 0]).reshape(t + 1, -1)[:, 0]
        lines.append(f"episode {1 + int(np.sum(np.diff(c) < 0))}")
    ret = getattr(states, "episode_return", None)
    if ret is None:
        return lines
    r = np.asarray(ret[t, 0], np.float64).reshape(-1)
    for g, ids in groups.items():
        name = "score" if len(groups) == 1 else g
        lines.append(f"{name} {r[np.asarray(ids)].mean():.3g}")
    return lines


LINE_PX = 12  # header text line height at the least (Pillow's built-in font)


def line_px(width: int) -> int:
    """A header line's height over a panel `width` pixels wide: the text grows
    with the panel (a tenth of its width), LINE_PX at the least."""
    return max(LINE_PX, width // 10)


def label_panels(frames: np.ndarray, lines: Sequence[Sequence[str]],
                 legend: Sequence[tuple[str, tuple[int, int, int]]] = ()) -> np.ndarray:
    """u8[T, line_px(W) * (n + k) + 2 + H, W, 3]: each frame of u8[T, H, W, 3]
    under a white header with its lines of text (lines[t], n of them, in black,
    the font scaled to the panel; text wider than W is cut off), then the
    legend's k lines: a swatch of each colour and its label
    (`jaxwarp.render.legend`), as many to a line as fit. The envs' own drawing
    is untouched."""
    from PIL import Image, ImageDraw, ImageFont

    frames = np.asarray(frames)
    n = max((len(x) for x in lines), default=0)
    step = line_px(frames.shape[2])
    try:  # Pillow >= 10.1 scales its built-in font; older ones keep the 8-pixel bitmap
        font = ImageFont.load_default(size=step - 3) if step > LINE_PX else None
    except TypeError:
        font = None
    keys = _legend_layout(legend, frames.shape[2], step, font)
    rows = 1 + max((row for row, _, _, _ in keys), default=-1)
    head = step * (n + rows) + 2
    out = np.full((frames.shape[0], head + frames.shape[1]) + frames.shape[2:], 255, np.uint8)
    out[:, head:] = frames
    for t, text in enumerate(lines):
        img = Image.fromarray(out[t, :head])
        pen = ImageDraw.Draw(img)
        for i, line in enumerate(text):
            pen.text((2, 1 + step * i), line, fill=(0, 0, 0), font=font)
        for row, x, label, colour in keys:
            top = 1 + step * (n + row)
            pen.rectangle((x, top + 2, x + step - 6, top + step - 4), fill=colour)
            pen.text((x + step - 3, top), label, fill=(0, 0, 0), font=font)
        out[t, :head] = np.asarray(img)
    return out


def _legend_layout(legend: Sequence[tuple[str, tuple[int, int, int]]], width: int, step: int,
                   font: Any) -> list[tuple[int, int, str, tuple[int, int, int]]]:
    """(row, x, label, colour) of each legend entry: a swatch step - 5 pixels
    wide, its label, a gap; entries flow onto the next row where the panel
    ends (one too wide for a row gets a row of its own, cut off)."""
    from PIL import Image, ImageDraw

    pen = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    out, row, x = [], 0, 2
    for label, colour in legend:
        w = step - 3 + int(pen.textlength(label, font=font)) + step // 2
        if x > 2 and x + w > width:
            row, x = row + 1, 2
        out.append((row, x, label, tuple(int(c) for c in colour)))
        x += w
    return out
