"""Training configuration: typed, frozen, validated, loadable from YAML.

A `TrainConfig` is built from nested mappings (YAML files, ``key=value``
overrides) by `config_from_dict`, which rejects unknown keys and bad values
with a message naming the key. Derived quantities (number of updates,
minibatch size, ...) are computed by `derived`, never written back.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from jaxwarp.errors import ConfigError
from jaxwarp.params_check import QUOTE_LIMIT, quoted
from jaxwarp.registry import env_spec

ALGORITHMS = ("ppo", "a2c")
ACTIVATIONS = ("tanh", "relu", "gelu", "silu", "elu")
DTYPES = ("float32", "bfloat16")
CONFIG_DIR = Path(__file__).parent / "configs"


# Seeds (a config's `seed`, the CLI's --seed) lie in [0, SEED_LIMIT): with
# x64 off jax.random.key keeps 32 bits, so larger seeds would replay smaller
# ones; int32's range keeps them exact everywhere they are stored.
SEED_LIMIT = 2**31
# update_epochs at most (`_validate`: PPO's epochs per update are a handful).
UPDATE_EPOCHS_LIMIT = 1000

# Seeds trained together at most (the CLI's --seeds; jaxwarp.train.seeds).
# Every seed holds its own envs, trajectories, parameters and optimiser state
# on the device and logs a metrics row per update, so beyond a few thousand a
# run is better split; the bound also keeps a mistyped --seeds 1000000 from
# looking hung.
MAX_SEEDS = 10_000
# Swept env params are config keys env_params.<name> (`setting_config`, `train.sweep`):
# any field of the env's params dataclass that changes nothing compiled into the env's
# program (`jaxwarp.authoring.ContractEnv.param_words` checks each setting).
ENV_PREFIX = "env_params."


@dataclasses.dataclass(frozen=True)
class PolicyConfig:
    """One policy group: one model and one optimiser shared by its agents."""

    # "mlp" (actor-critic MLP) | "gru" (recurrent: MLP embedding, GRU, heads) | "uniform"
    # (random baseline) | a registered name
    model: str = "mlp"
    hidden_sizes: tuple[int, ...] = (256, 256)  # MLP torso widths (gru: its embedding MLP)
    rnn_size: int = 128  # gru: GRU units (and the width of its heads' hidden layer)
    activation: str = "tanh"  # one of ACTIVATIONS
    shared_torso: bool = False  # one torso for actor and critic (WarpDrive's model) vs two
    dtype: str = "float32"  # matmul compute dtype: "float32" | "bfloat16" (params stay f32)
    lr: float = 3e-4  # Adam learning rate (linearly annealed to 0 when anneal_lr)
    train: bool = True  # False: the policy acts but is never updated (WarpDrive's to_train)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything one training run needs; hashable and static under jit."""

    env: str = "tag_continuous"  # registered env name (jaxwarp.registered_envs())
    env_module: str | None = None  # a .py file or module to import first (registers a user env)
    env_config: str | None = None  # named env configuration (jaxwarp.make's config=) or None
    env_params: tuple[tuple[str, Any], ...] = ()  # env parameter overrides (name, value)
    backend: str = "auto"  # env backend: "auto" | "cuda" | "cpu" | "jax"
    # action sampler: "auto" (the kernel unless backend is "jax") | "cuda" | "cpu" | "jax"
    sampler: str = "auto"
    # observations as the env writes them and the rollout stores them: "float32" |
    # "bfloat16" (half the bytes; for bfloat16 policies, whose first matmul rounds them anyway)
    obs_dtype: str = "float32"
    num_envs: int = 100  # env replicas stepped together
    num_steps: int = 100  # rollout length T per update (batch = num_envs * num_steps env-steps)
    total_env_steps: int = 10_000_000  # run length; updates = total_env_steps // batch
    algorithm: str = "ppo"  # "ppo" | "a2c"
    gamma: float = 0.99  # discount
    gae_lambda: float = 0.95  # GAE lambda (1.0: Monte-Carlo returns bootstrapped at T)
    clip_eps: float = 0.2  # PPO ratio clip
    ent_coef: float = 0.01  # entropy bonus weight
    vf_coef: float = 0.5  # value loss weight
    max_grad_norm: float = 0.5  # global gradient-norm clip (0 disables)
    update_epochs: int = 4  # PPO epochs per update (A2C: 1)
    num_minibatches: int = 4  # PPO: minibatches per epoch, split along envs. A2C: chunks
    #   of envs whose gradients are accumulated into its one step (bounds memory)
    # PPO over several devices: "device" draws each minibatch from every device's own envs
    # (a permutation per device; no exchange of the batch); "global": one permutation of
    # all envs, the batch dealt out between devices once per epoch (an all-gather), giving
    # the one-device curve up to float order. One device: the same either way.
    minibatch_shuffle: str = "device"
    # PPO: what a minibatch holds. "envs": whole env sequences (every step of a set of
    # envs; the only layout for recurrent models, whose minibatches replay sequences);
    # "samples": single steps (env, step pairs) drawn from the whole batch, PureJaxRL's
    # layout, less correlated minibatches where envs are few. Over several devices
    # "samples" shuffles each device's own steps. "auto": samples unless a group's
    # model is recurrent (docs/decisions.md: as soon or sooner on every case measured).
    minibatch_layout: str = "auto"
    anneal_lr: bool = True  # linear learning-rate decay to 0 over the run
    normalize_advantages: bool = True  # per-minibatch advantage normalisation
    normalize_obs: bool = False  # running mean/std observation normalisation per group
    # "independent": each agent's critic reads its own observation (IPPO); "centralised":
    # the value function reads the env's global state (MAPPO; envs with a `global_state`)
    critic: str = "independent"
    policies: tuple[tuple[str, PolicyConfig], ...] = ()  # per-group overrides (name, config)
    seed: int = 0  # PRNG seed of the run (the CLI's --seeds S trains seed..seed+S-1)
    chunk_updates: int = 10  # CLI: updates per jitted call (progress/log granularity)
    checkpoint_every: int = 50  # CLI: updates between checkpoints (a multiple of chunk_updates)
    # Data parallelism (docs/sharding.md): devices per process that the envs are split over;
    # None: every local device (jax.local_device_count()); 1: one device, no mesh. num_envs
    # must be divisible by devices x processes.
    devices: int | None = None
    # Multi-host: call jax.distributed.initialize at the start of the run (also done when
    # JAX_COORDINATOR_ADDRESS is set); see jaxwarp/run/distributed.py.
    distributed: bool = False
    # Reproducible GPU runs: XLA's deterministic GPU ops (no atomics in reductions), passed
    # per compilation (jaxwarp.train.jit); false: the faster run-to-run-varying path.
    deterministic: bool = True

    def policy(self, name: str) -> PolicyConfig:
        """The configuration of policy group `name` (defaults where not given)."""
        return dict(self.policies).get(name, PolicyConfig())

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (YAML-ready); inverse of `config_from_dict`."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "env_params":
                v = {k: _plain(x) for k, x in v}
            elif f.name == "policies":
                v = {k: {g.name: _plain(getattr(p, g.name)) for g in dataclasses.fields(p)}
                     for k, p in v}
            out[f.name] = _plain(v)
        return out


def _plain(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


@dataclasses.dataclass(frozen=True)
class Derived:
    """Quantities computed from a config (never stored in it)."""

    batch_env_steps: int  # env-steps per update
    num_updates: int
    minibatch_envs: int  # envs per minibatch (PPO) or gradient chunk (A2C)
    epochs: int
    minibatches: int  # minibatches (PPO) or gradient chunks (A2C) per epoch
    optimizer_steps: int  # Optax steps per update and group


def derived(config: TrainConfig) -> Derived:
    """Run length and minibatch layout of `config`."""
    batch = config.num_envs * config.num_steps
    ppo = config.algorithm == "ppo"
    epochs = config.update_epochs if ppo else 1
    minibatches = config.num_minibatches
    return Derived(batch_env_steps=batch, num_updates=config.total_env_steps // batch,
                   minibatch_envs=config.num_envs // minibatches, epochs=epochs,
                   minibatches=minibatches, optimizer_steps=epochs * minibatches if ppo else 1)


# ---------------------------------------------------------------------------
# Building and validating configs from mappings / YAML / key=value strings.
# ---------------------------------------------------------------------------
def _field_types(cls) -> dict[str, Any]:
    return {f.name: f for f in dataclasses.fields(cls)}


def _coerce(where: str, value: Any, default: Any, allow_none: bool) -> Any:
    """Checks `value` against the type of the field's default."""
    if value is None and allow_none:
        return None
    kind = type(default)
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {quoted(value)}")
        return value
    if isinstance(default, int) and not isinstance(default, bool):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {quoted(value)}")
        return value
    if isinstance(default, float):
        if isinstance(value, str):  # YAML 1.1 reads "1e-4" (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {quoted(value)}")
        if not math.isfinite(value):  # .inf / .nan would train on NaN losses
            raise ConfigError(f"{where}: expected a finite number, got {quoted(value)}")
        return float(value)
    if isinstance(default, str) or (default is None and allow_none):
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {quoted(value)}")
        return value
    if kind is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {quoted(value)}")
        return tuple(value)
    return value


def _policy_from_dict(name: str, d: Any) -> PolicyConfig:
    name = _shown_key(name)  # for the messages
    if d is None:
        d = {}
    if not isinstance(d, Mapping):
        raise ConfigError(f"policies.{name}: expected a mapping, got {quoted(d)}")
    fields = _field_types(PolicyConfig)
    kwargs = {}
    for k, v in d.items():
        if k not in fields:
            raise ConfigError(f"policies.{name}.{_shown_key(k)}: unknown key; expected one of "
                              f"{sorted(fields)}")
        kwargs[k] = _coerce(f"policies.{name}.{k}", v, fields[k].default, allow_none=False)
    p = PolicyConfig(**kwargs)
    if not p.hidden_sizes or any(not isinstance(h, int) or isinstance(h, bool) or h < 1
                                 for h in p.hidden_sizes):
        raise ConfigError(f"policies.{name}.hidden_sizes: expected a non-empty list of "
                          f"positive integers, got {quoted(list(p.hidden_sizes))}")
    if p.activation not in ACTIVATIONS:
        raise ConfigError(f"policies.{name}.activation: {quoted(p.activation)} is unknown; "
                          f"expected one of {ACTIVATIONS}")
    if p.dtype not in DTYPES:
        raise ConfigError(f"policies.{name}.dtype: {quoted(p.dtype)} is unknown; expected one "
                          f"of {DTYPES}")
    if not p.lr >= 0:
        raise ConfigError(f"policies.{name}.lr: expected a number >= 0, got {p.lr}")
    if isinstance(p.rnn_size, bool) or not isinstance(p.rnn_size, int) or p.rnn_size < 1:
        raise ConfigError(f"policies.{name}.rnn_size: expected an integer >= 1, got "
                          f"{p.rnn_size!r}")
    return p


def config_from_dict(d: Mapping[str, Any], base: TrainConfig | None = None) -> TrainConfig:
    """Builds a validated `TrainConfig` from a nested mapping over `base`.

    Raises ConfigError naming the key for unknown keys, wrong types and
    out-of-range values. Model names and policy group names are checked
    against the env when the trainer is built.
    """
    base = base or TrainConfig()
    if not isinstance(d, Mapping):
        raise ConfigError(f"a training config must be a mapping; got {type(d).__name__}")
    fields = _field_types(TrainConfig)
    kwargs: dict[str, Any] = {}
    for k, v in d.items():
        if k not in fields:
            raise ConfigError(f"{_shown_key(k)}: unknown config key; expected one of "
                              f"{sorted(fields)}")
        if k == "env_params":
            if v is None:
                v = {}
            if not isinstance(v, Mapping):
                raise ConfigError(f"env_params: expected a mapping, got {quoted(v)}")
            merged = dict(base.env_params)
            merged.update(v)
            kwargs[k] = tuple(sorted(merged.items()))
        elif k == "policies":
            if v is None:
                v = {}
            if not isinstance(v, Mapping):
                raise ConfigError(f"policies: expected a mapping of group name -> settings, "
                                  f"got {quoted(v)}")
            merged = dict(base.policies)
            for name, pd in v.items():
                if pd is None:
                    pd = {}
                if not isinstance(pd, Mapping):
                    raise ConfigError(f"policies.{_shown_key(name)}: expected a mapping, got "
                                      f"{quoted(pd)}")
                settings = dataclasses.asdict(merged.get(str(name), PolicyConfig()))
                settings.update(pd)
                merged[str(name)] = _policy_from_dict(name, settings)
            kwargs[k] = tuple(sorted(merged.items()))
        elif k == "devices":  # an integer or null (every local device)
            kwargs[k] = None if v is None else _coerce(k, v, 0, allow_none=False)
        else:
            kwargs[k] = _coerce(k, v, fields[k].default,
                                allow_none=k in ("env_config", "env_module"))
    config = dataclasses.replace(base, **kwargs)
    validate(config)
    return config


def validate(c: TrainConfig) -> None:
    """Range checks that do not need the env."""
    def need(ok: bool, key: str, what: str) -> None:
        if not ok:
            raise ConfigError(f"{key}={quoted(getattr(c, key))} is invalid; expected {what}")

    need(c.algorithm in ALGORITHMS, "algorithm", f"one of {ALGORITHMS}")
    need(c.backend in ("auto", "cuda", "cpu", "jax"), "backend", "auto, cuda, cpu or jax")
    need(c.sampler in ("auto", "cuda", "cpu", "jax"), "sampler", "auto, cuda, cpu or jax")
    need(c.obs_dtype in DTYPES, "obs_dtype", f"one of {DTYPES}")
    need(c.num_envs >= 1, "num_envs", "an integer >= 1")
    need(c.num_steps >= 1, "num_steps", "an integer >= 1")
    need(c.total_env_steps >= c.num_envs * c.num_steps, "total_env_steps",
         f"at least one update's worth: num_envs * num_steps = {c.num_envs * c.num_steps}")
    need(0 <= c.gamma <= 1, "gamma", "a number in [0, 1]")
    need(0 <= c.gae_lambda <= 1, "gae_lambda", "a number in [0, 1]")
    need(c.clip_eps > 0, "clip_eps", "a number > 0")
    need(c.ent_coef >= 0, "ent_coef", "a number >= 0")
    need(c.vf_coef >= 0, "vf_coef", "a number >= 0")
    need(c.max_grad_norm >= 0, "max_grad_norm", "a number >= 0 (0 disables clipping)")
    # Bounded: PPO uses a few epochs (1-32); a count past UPDATE_EPOCHS_LIMIT is a
    # typo that would make each update run for hours or days without a sign.
    need(1 <= c.update_epochs <= UPDATE_EPOCHS_LIMIT, "update_epochs",
         f"an integer in [1, {UPDATE_EPOCHS_LIMIT}]")
    need(c.num_minibatches >= 1, "num_minibatches", "an integer >= 1")
    need(c.num_envs % c.num_minibatches == 0, "num_minibatches",
         f"a divisor of num_envs={c.num_envs} (minibatches split the envs)")
    need(c.minibatch_shuffle in ("device", "global"), "minibatch_shuffle", "device or global")
    need(c.critic in ("independent", "centralised"), "critic", "independent or centralised")
    need(c.minibatch_layout in ("auto", "envs", "samples"), "minibatch_layout",
         "auto, envs or samples")
    need(c.chunk_updates >= 1, "chunk_updates", "an integer >= 1")
    need(c.checkpoint_every >= 1 and c.checkpoint_every % c.chunk_updates == 0,
         "checkpoint_every", f"a positive multiple of chunk_updates={c.chunk_updates}")
    need(0 <= c.seed < SEED_LIMIT, "seed", "an integer in [0, 2**31)")
    need(c.devices is None or c.devices >= 1, "devices",
         "an integer >= 1, or null for every local device")


# A config file's size at most: configs are a few KB; a bigger file is a mistake.
CONFIG_FILE_LIMIT = 1 << 20


def _shown_key(key: Any) -> str:
    """A config key as messages print it (a str as it is, up to QUOTE_LIMIT
    characters; otherwise `quoted`)."""
    return str(key) if isinstance(key, str) and len(key) <= QUOTE_LIMIT else quoted(key)


class _ConfigLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses anchors and aliases (a few hundred bytes of
    nested aliases expand to gigabytes: "billion laughs") and keys given twice
    in one mapping (YAML would keep the last one silently)."""

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise _refused(f"YAML alias *{event.anchor[:40]}", event.start_mark,
                           "anchors and aliases are not allowed in a config; write the value out")
        if getattr(event, "anchor", None) is not None:
            raise _refused(f"YAML anchor &{event.anchor[:40]}", event.start_mark,
                           "anchors and aliases are not allowed in a config; write the value out")
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    twice = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: left to the constructor's error
                    continue
                if twice:
                    raise _refused(f"key {_shown_key(key)}", key_node.start_mark,
                                   "given twice in one mapping; give it once")
        return super().construct_mapping(node, deep)


def _refused(what: str, mark: Any, why: str) -> yaml.YAMLError:
    """A YAMLError whose problem reads "<what> at line L, column C: <why>"."""
    e = yaml.YAMLError(f"{what}: {why}")
    e.problem = f"{what} at line {mark.line + 1}, column {mark.column + 1}: {why}"
    return e


def load_yaml(text: str) -> Any:
    """`yaml.safe_load` for configs: no anchors or aliases, no key twice in a
    mapping (yaml.YAMLError naming the problem and line, see `yaml_error`)."""
    return yaml.load(text, Loader=_ConfigLoader)  # a SafeLoader subclass: no Python objects


def yaml_error(e: yaml.YAMLError) -> str:
    """One line for a YAML error: the problem and where (line and column, 1-based)."""
    problem = getattr(e, "problem", None) or " ".join(str(e).split())
    mark = getattr(e, "problem_mark", None)
    if mark is not None:
        problem += f" at line {mark.line + 1}, column {mark.column + 1}"
    return problem


def parse_override(text: str) -> dict[str, Any]:
    """``"a.b=value"`` -> ``{"a": {"b": value}}`` with the value parsed as YAML."""
    if "=" not in text:
        raise ConfigError(f"override {quoted(text)}: expected key=value (e.g. num_envs=64)")
    key, raw = text.split("=", 1)
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {quoted(text)}: empty key")
    try:
        value = load_yaml(raw) if raw.strip() else None
    except yaml.YAMLError as e:
        raise ConfigError(f"override {quoted(text)}: the value is not valid YAML ({yaml_error(e)})"
                          ) from None
    out: dict[str, Any] = {}
    node = out
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return out


def merge(a: dict[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Recursive dict merge (b wins)."""
    out = dict(a)
    for k, v in b.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = merge(dict(out[k]), v)
        else:
            out[k] = v
    return out


def setting_config(base: TrainConfig, setting: Mapping[str, float]) -> TrainConfig:
    """`base` with a sweep setting's values (dotted keys -> value), checked as
    a config is (a ConfigError naming the setting and the key)."""
    d = base.to_dict()
    for k, v in setting.items():
        if k.startswith(ENV_PREFIX) and float(v).is_integer():
            v = int(v)  # an int field's value (a float field takes it as a float)
        *path, last = k.split(".")
        node: dict[str, Any] = {last: v}
        for part in reversed(path):
            node = {part: node}
        d = merge(d, node)
    try:
        return config_from_dict(d)
    except ConfigError as e:
        shown = ", ".join(f"{k}={v:g}" for k, v in setting.items())
        raise ConfigError(f"sweep setting {shown}: {e}") from None


def setting_configs(base: TrainConfig, settings: Sequence[Mapping[str, float]]
                    ) -> list[TrainConfig]:
    """Each of a sweep's `settings` as a config (`setting_config`); [] for none."""
    return [setting_config(base, s) for s in settings]


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()
                ) -> TrainConfig:
    """Config from a YAML file (a path, or the name of a shipped config such as
    ``"tag_warpdrive_default"``) plus ``key=value`` overrides."""
    d: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.exists() and (CONFIG_DIR / f"{path}.yaml").exists():
            p = CONFIG_DIR / f"{path}.yaml"
        if not p.exists():
            shipped = sorted(q.stem for q in CONFIG_DIR.glob("*.yaml"))
            raise ConfigError(f"config {str(path)!r}: no such file and not a shipped config "
                              f"(shipped: {shipped})")
        try:
            size = p.stat().st_size
            if size > CONFIG_FILE_LIMIT:
                raise ConfigError(f"config {str(p)!r}: {size:,} bytes; a config file is at most "
                                  f"{CONFIG_FILE_LIMIT:,} bytes")
            loaded = load_yaml(p.read_text())
        except yaml.YAMLError as e:
            raise ConfigError(f"config {str(p)!r}: invalid YAML ({yaml_error(e)})") from None
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"config {str(p)!r}: cannot read it ({e})") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, Mapping):
            raise ConfigError(f"config {str(p)!r}: expected a YAML mapping at the top level")
        d = dict(loaded)
    for o in overrides:
        o_dict = parse_override(o)
        _check_env_change(path, d, o_dict)
        d = merge(d, o_dict)
    return config_from_dict(d)


# Keys whose values belong to one env: a config that sets them is written for its env.
ENV_SPECIFIC_KEYS = ("env_config", "env_params", "env_module", "policies")


def _check_env_change(path: Any, d: Mapping[str, Any], override: Mapping[str, Any]) -> None:
    """ConfigError when an override sets ``env`` to another env than the config
    file's while the file holds settings of its own env (its named env
    configuration, env params, policy groups), which would go to the new env."""
    if path is None or "env" not in override or "env" not in d or override["env"] == d["env"]:
        return
    own = [k for k in ENV_SPECIFIC_KEYS if d.get(k) not in (None, {}, [])]
    if own:
        env, own_env = _shown_key(override["env"]), _shown_key(d["env"])
        raise ConfigError(
            f"env={env} contradicts the config {_shown_key(str(path))}, which is written for "
            f"{own_env} (its {', '.join(own)} belong to that env); use a config written for "
            f"{env} (jaxwarp configs lists them) or none")


def shipped_configs() -> list[str]:
    """Names of the YAML configs shipped in `jaxwarp/train/configs`."""
    return sorted(q.stem for q in CONFIG_DIR.glob("*.yaml"))


def config_description(name: str | Path, limit: int = 100) -> str:
    """One line about a config: the first sentence of the comment block that
    opens its YAML file (a shipped config's name or a path), cut to `limit`
    characters; "" when the file opens with no comment or cannot be read.

    Shipped configs open with a one-sentence summary line for `jaxwarp
    configs`; the paragraph after it says more. Comments are not part of
    the config, so the file loads as before.
    """
    p = Path(name)
    if not p.exists():
        p = CONFIG_DIR / f"{name}.yaml"
    try:
        lines = p.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return ""
    words: list[str] = []
    for line in lines:
        text = line.strip()
        if not text.startswith("#") or (words and not text.lstrip("#").strip()):
            break  # the opening comment's first paragraph ends here
        words += text.lstrip("#").split()
    paragraph = " ".join(words)
    end = re.search(r"[.!?](\s|$)", paragraph)
    first = paragraph[:end.start() + 1] if end else paragraph
    return first if len(first) <= limit else first[:limit - 3].rstrip() + "..."



def default_config_for(env: str) -> str | None:
    """The shipped config `jaxwarp train --env env` starts from when no
    --config is given: the env's own choice (its spec's ``default_config``, a
    config that learns in reasonable time on it; see each file's header), or
    None (the TrainConfig defaults; also for an unknown env)."""
    name = getattr(env_spec(env), "default_config", None)
    return name if name in shipped_configs() else None
