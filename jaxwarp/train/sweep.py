"""A sweep's settings: values of the hyperparameters that change no shape,
trained together as one vmapped program (docs/sweeps.md).

`parse_sweep` splits ``key=value`` words into plain overrides (one value)
and swept keys: a grid (``key=a,b,c``) or a random draw per setting
(``key=uniform(lo,hi)``, ``key=loguniform(lo,hi)``, with ``samples``
draws). `Sweep.settings` lists the settings (the grid's product, in the
order given, crossed with the draws); `Sweep.configs` gives each setting's
full `TrainConfig`, checked as ``jaxwarp train`` checks one; `stacked_hyper`
stacks their `Hyper` arrays over settings x seeds (member ``k * seeds + s``:
setting k, seed ``config.seed + s``), the leading axis the program vmaps.
Swept env params (``env_params.<name>``) become each setting's Params words
(`setting_words`), checked by the params dataclass and by the env: a value
that would change what is compiled in (shapes, static params) is refused.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp.errors import ConfigError
from jaxwarp.params_check import check_params, check_values, quoted
from jaxwarp.train.config import ENV_PREFIX, PolicyConfig, TrainConfig, setting_configs
from jaxwarp.train.hyper import GROUP_SWEEPABLE, SWEEPABLE, Hyper, takes_params
from jaxwarp.train.trainer import build_trainer

# Settings in one sweep at most (each trains `seeds` members; MAX_SEEDS bounds the product).
MAX_SETTINGS = 4096
_RANDOM = re.compile(r"^(uniform|loguniform)\((.*)\)$")
_GROUP_KEY = re.compile(r"^policies\.([^.]+)\.(\w+)$")
_ENV_KEY = re.compile(r"^env_params\.[A-Za-z_]\w*$")
# How errors list what a sweep may vary.
_SWEEPABLE_TEXT = f"{', '.join(SWEEPABLE)}, policies.<group>.lr and env_params.<name>"


@dataclasses.dataclass(frozen=True)
class Sweep:
    """Swept keys -> values (grid) or (distribution, low, high) (random draws)."""

    grid: tuple[tuple[str, tuple[float, ...]], ...] = ()
    random: tuple[tuple[str, tuple[str, float, float]], ...] = ()
    samples: int = 1  # random draws crossed with the grid (1 without random keys)
    seed: int = 0  # the draws' seed

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.grid) + tuple(k for k, _ in self.random)

    def settings(self) -> list[dict[str, float]]:
        """Every setting: swept key -> value, the grid's product (first key
        slowest) crossed with `samples` draws of the random keys."""
        rng = np.random.default_rng(self.seed)
        draws = [{k: _draw(rng, *d) for k, d in self.random} for _ in range(self.samples)]
        grid = [dict(zip([k for k, _ in self.grid], vals))
                for vals in itertools.product(*(v for _, v in self.grid))]
        return [g | d for g in grid for d in draws]

    def to_dict(self) -> dict[str, Any]:
        """Plain data for config.yaml (`from_dict` reads it back); the settings
        listed too, for whoever reads the file."""
        return {"grid": {k: list(v) for k, v in self.grid},
                "random": {k: list(d) for k, d in self.random},
                "samples": self.samples, "seed": self.seed, "settings": self.settings()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Sweep:
        """The sweep `to_dict` wrote (its swept keys checked again)."""
        sweep = cls(tuple((str(k), tuple(float(x) for x in v)) for k, v in d["grid"].items()),
                    tuple((str(k), (str(v[0]), float(v[1]), float(v[2])))
                          for k, v in d["random"].items()),
                    int(d["samples"]), int(d["seed"]))
        check_sweepable(sweep.keys)
        return sweep

    def configs(self, base: TrainConfig) -> list[TrainConfig]:
        """Each setting's config: `base` with the setting's values, range-checked
        (a ConfigError naming the key and value)."""
        return setting_configs(base, self.settings())


def _draw(rng: np.random.Generator, dist: str, lo: float, hi: float) -> float:
    if dist == "loguniform":
        return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))
    return float(rng.uniform(lo, hi))


def parse_sweep(words: Sequence[str], samples: int | None = None, seed: int = 0
                ) -> tuple[list[str], Sweep]:
    """(plain overrides, the sweep) of ``key=value`` words. A value with a
    comma outside brackets is a grid; ``uniform(lo,hi)`` / ``loguniform(lo,hi)``
    a random draw per setting (``samples`` of them, required then). Swept keys
    must be sweepable (`check_sweepable`)."""
    plain, grid, random = [], [], []
    for w in words:
        key, sep, raw = w.partition("=")
        raw = raw.strip()
        m = _RANDOM.match(raw)
        if sep and m:
            check_sweepable([*(k for k, _ in grid + random), key.strip()])
            random.append((key.strip(), _random_spec(key, m.group(1), m.group(2))))
        elif sep and len(_top_level(raw)) > 1:
            check_sweepable([*(k for k, _ in grid + random), key.strip()])
            grid.append((key.strip(), _grid_values(key, raw)))
        else:
            plain.append(w)
    keys = [k for k, _ in grid] + [k for k, _ in random]
    if random and samples is None:
        raise ConfigError(f"{keys[len(grid)]}: a random draw needs --samples N (settings drawn)")
    if samples is not None and not 1 <= samples <= MAX_SETTINGS:
        raise ConfigError(f"--samples must be in [1, {MAX_SETTINGS}]; got {samples}")
    sweep = Sweep(tuple(grid), tuple(random), samples or 1, seed)
    n = math.prod(len(v) for _, v in grid) * sweep.samples
    if not keys:
        raise ConfigError("a sweep needs at least one swept key: key=a,b,c (a grid) or "
                          f"key=uniform(lo,hi) with --samples N; sweepable: {_SWEEPABLE_TEXT}")
    if n > MAX_SETTINGS:
        raise ConfigError(f"the sweep has {n} settings; at most {MAX_SETTINGS}")
    return plain, sweep


def _number(key: str, text: str) -> float:
    try:  # float(): YAML reads 1e-3 as a string
        v = float(text.strip())
    except ValueError:
        v = math.nan
    if not math.isfinite(v):
        raise ConfigError(f"{key}: expected finite numbers, got {quoted(text.strip())}")
    return v


def _top_level(raw: str) -> list[str]:
    """`raw` split at its commas outside brackets ([8,8],[16] -> two parts)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(raw):
        depth += (ch in "[{(") - (ch in "]})")
        if ch == "," and depth == 0:
            parts.append(raw[start:i])
            start = i + 1
    return [*parts, raw[start:]]


def _grid_values(key: str, raw: str) -> tuple[float, ...]:
    parts = raw.split(",")
    if any(not p.strip() for p in parts):
        raise ConfigError(f"{key}={raw}: an empty value in the list (expected key=a,b,c)")
    return tuple(_number(key, p) for p in parts)


def _random_spec(key: str, dist: str, args: str) -> tuple[str, float, float]:
    parts = args.split(",")
    if len(parts) != 2:
        raise ConfigError(f"{key}={dist}({args}): expected {dist}(low,high)")
    lo, hi = (_number(key, p) for p in parts)
    if not lo < hi or (dist == "loguniform" and lo <= 0):
        raise ConfigError(f"{key}={dist}({args}): expected low < high"
                          + (", both > 0" if dist == "loguniform" else ""))
    return dist, lo, hi


def check_sweepable(keys: Iterable[str]) -> None:
    """ConfigError naming the first key a sweep cannot vary: one that changes
    the program's shapes or structure, or one that is not a config key."""
    seen = set()
    for k in keys:
        if k in seen:
            raise ConfigError(f"{k}: swept twice")
        seen.add(k)
        m = _GROUP_KEY.match(k)
        if k in SWEEPABLE or (m and m.group(2) in GROUP_SWEEPABLE) or _ENV_KEY.match(k):
            continue
        known = {f.name for f in dataclasses.fields(TrainConfig)}
        what = ("changes the program's shapes or structure, so it cannot vary within one "
                "program (run one sweep per value)") if k.split(".")[0] in known or m \
            else "is not a config key"
        raise ConfigError(f"{k}: {what}; a sweep varies {_SWEEPABLE_TEXT}")


def stacked_hyper(configs: Sequence[TrainConfig], groups: Iterable[str], seeds: int,
                  env: Any = None, settings: Sequence[Mapping[str, float]] | None = None
                  ) -> Hyper:
    """Every member's `Hyper` stacked: f32[settings * seeds] per leaf (the
    env's words i32[settings * seeds, W]), member ``k * seeds + s`` holding
    setting k's values: configs[k]'s hyperparameters and, with `env`, the
    env's params with settings[k]'s ``env_params.<name>`` values
    (`setting_words`)."""
    groups = list(groups)
    params = [setting_params(env, s) for s in settings or [{}] * len(configs)] \
        if env is not None else [None] * len(configs)
    each = [Hyper.of(c, groups, env, p) for c, p in zip(configs, params) for _ in range(seeds)]
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *each)


def setting_params(env: Any, setting: Mapping[str, float]) -> Any:
    """`env`'s params with `setting`'s ``env_params.<name>`` values (None when
    it has none): checked by the params dataclass (its types, finiteness and
    range checks) and by the env (`ContractEnv.param_words`: nothing compiled
    in may change). ConfigError naming the key at fault."""
    swept = {k[len(ENV_PREFIX):]: v for k, v in setting.items() if k.startswith(ENV_PREFIX)}
    if not swept:
        return None
    if not takes_params(env):
        raise ConfigError(f"{ENV_PREFIX}{next(iter(swept))}: sweeping env params needs a "
                          "contract env on the 'cpu' or 'cuda' backend (backend=cpu or cuda)")
    params = env.params
    for name, value in swept.items():  # one key at a time first: the error names it
        _with_values(env, params, {name: value}, f"{ENV_PREFIX}{name}")
    return _with_values(env, params, swept, ", ".join(ENV_PREFIX + k for k in swept))


def _with_values(env: Any, params: Any, values: Mapping[str, float], keys: str) -> Any:
    """`params` with `values`, whose words `env` accepts; ConfigError naming `keys`."""
    fields = {f.name for f in dataclasses.fields(params)}
    unknown = sorted(set(values) - fields)
    if unknown:
        raise ConfigError(f"{ENV_PREFIX}{unknown[0]}: not a parameter of {env.name} "
                          f"(its parameters: {', '.join(sorted(fields))})")
    # A grid's numbers are floats: an int field takes a whole one (25.0 -> 25).
    values = {k: int(v) if isinstance(getattr(params, k), int)
              and not isinstance(getattr(params, k), bool) and float(v).is_integer() else v
              for k, v in values.items()}
    try:
        p = dataclasses.replace(params, **check_values(type(params), values, env.name))
        check_params(p, env.name)
        env.param_words(p)
        _check_metrics(env, p)
    except (TypeError, ValueError) as e:
        shown = ", ".join(f"{k}={v:g}" for k, v in values.items())
        raise ConfigError(f"{keys}: {shown}: {e}") from None
    return p


def _check_metrics(env: Any, params: Any) -> None:
    """ValueError where `params` change the episode metrics that `env`
    computes in Python (Tag's tags_per_episode divides by its tag reward):
    the program logs them with the env's own params, so they would be wrong
    for this setting. Compared on one probe of returns, f32[1, agents]."""
    env = getattr(env, "env", env)  # a ShardedEnv's env
    if not hasattr(env, "episode_metrics"):
        return
    other = copy.copy(env)
    other.params = params
    probe = jnp.arange(1, env.num_agents + 1, dtype=jnp.float32)[None] * 0.75
    mine, theirs = env.episode_metrics(probe), other.episode_metrics(probe)
    if mine.keys() != theirs.keys() or any(
            not np.array_equal(np.asarray(mine[k]), np.asarray(theirs[k])) for k in mine):
        raise ValueError(f"the env's episode metrics ({', '.join(sorted(mine | theirs))}) are "
                         "computed from its params outside the program; sweep it as separate "
                         "runs")


def same_program(base: TrainConfig, configs: Sequence[TrainConfig]) -> None:
    """ConfigError unless every config differs from `base` in sweepable values
    alone (so one program trains them all)."""
    groups = {g for c in (base, *configs) for g, _ in c.policies}
    unswept = {k: getattr(PolicyConfig(), k) for k in GROUP_SWEEPABLE}

    # Env params: the env checks each setting's (`setting_params`).
    def fixed(c: TrainConfig) -> TrainConfig:
        return dataclasses.replace(
            c, **{k: getattr(base, k) for k in SWEEPABLE}, env_params=base.env_params,
            policies=tuple((g, dataclasses.replace(c.policy(g), **unswept))
                           for g in sorted(groups)))

    want = fixed(base)
    for c in configs:
        if fixed(c) != want:
            raise ConfigError("a sweep's settings may differ only in sweepable keys")


def make_sweep(config: TrainConfig, sweep: Sweep, env: Any = None,
               models: Mapping[str, Any] | None = None) -> Callable[[jax.Array], Any]:
    """``train(keys) -> (final RunnerState, metrics name -> f32[members, updates])``
    for every setting of `sweep` with every key of ``keys`` (u32[seeds, 2], e.g.
    ``jaxwarp.train.seeds.seed_keys(seed, seeds)``): members ``settings x
    seeds``, member ``k * seeds + s`` setting k with key s; one pure function,
    ``jax.jit`` runs the whole sweep as one program."""
    trainer = build_trainer(config, env=env, models=models)
    configs = sweep.configs(config)
    same_program(config, configs)
    settings = sweep.settings()
    stacked_hyper(configs, trainer.groups, 1, trainer.env, settings)  # checked before compiling

    def train(keys: jax.Array):
        seeds = keys.shape[0]
        members = jnp.tile(keys, (len(configs), 1))
        with jax.ensure_compile_time_eval():  # constants of the program, not traced
            hyper = stacked_hyper(configs, trainer.groups, seeds, trainer.env, settings)
        # Each member's envs start from a reset with its setting's env params.
        rs = jax.vmap(trainer.init)(members, jax.tree.map(jnp.asarray, hyper))
        return jax.vmap(lambda r: trainer.run(r, trainer.derived.num_updates))(rs)

    return train
