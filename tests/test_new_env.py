"""A new env needs its files and nothing else: no list of envs to edit.

A throwaway env, ``beacon_walk`` (a header, a spec module and a page, written
into a temporary folder named by their contents), is registered the way a user's env is
(``env_module=PATH.py``, docs/custom_env.md §6) and is then

* conformance-tested: every check of tests/test_conformance.py that is
  parametrized over the registered envs runs on it, on every backend it
  runs the built-ins on (`conformance_cases` finds them: a check added there
  runs here too);
* documented: `jaxwarp.registry.env_doc` finds its page, and the page checks
  of tests/test_env_docs.py (``test_page_*``) hold for it;
* trainable: a tiny `make_train` run on the cpu backend returns finite losses.

It stays out of the built-ins (`builtin_envs`, the prebuilt layouts), and is
unregistered when the module's tests end.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import os
import sys
import tempfile
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxwarp
import test_conformance as conformance
import test_env_docs as env_docs
from jaxwarp import layouts, registry
from jaxwarp.train import config_from_dict, make_train
from jaxwarp.train.trainer import import_env_module

NAME = "beacon_walk"

HEADER = """\
// beacon_walk: a throwaway env of tests/test_new_env.py (not a built-in).
// Agents on [0, 1] walk toward one beacon per env; reward: minus the distance.
#pragma once

constexpr int kStepPhases = 1;

JW_HD void reset(const Params&, const State& s, const jaxwarp::Agent& a) {
  s.x[a.agent] = a.uniform(0);
  if (a.agent == 0) s.beacon[0] = a.uniform(1);
}

JW_HD void step(const Params& p, const State& s, const jaxwarp::Agent& a, const int32_t* action,
                int, jaxwarp::StepResult& r) {
  const int i = a.agent;
  const int m = action[0];  // 0 stay, 1 right, 2 left; out of range: stay
  const float dx = m == 1 ? p.step_size : (m == 2 ? -p.step_size : 0.0f);
  s.x[i] = fminf(fmaxf(s.x[i] + dx, 0.0f), 1.0f);
  r.reward = -fabsf(s.x[i] - s.beacon[0]);
}

JW_HD void observe(const Params&, const State& s, const jaxwarp::Agent& a, float* obs) {
  obs[0] = s.beacon[0] - s.x[a.agent];
  obs[1] = s.x[a.agent];
}
"""

MODULE = '''\
"""beacon_walk: a throwaway env of tests/test_new_env.py (not a built-in)."""
import dataclasses
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

import jaxwarp
from jaxwarp.authoring import EnvSpec, agent_uniform, state_field
from jaxwarp.core import finish_step

F32 = np.float32


@dataclasses.dataclass(frozen=True)
class BeaconWalkParams:
    num_agents: int = 2
    step_size: float = 0.125
    max_steps: int = 6

    def __post_init__(self):
        if not (isinstance(self.num_agents, int) and self.num_agents >= 1):
            raise ValueError(f"beacon_walk: num_agents={self.num_agents!r}; expected an int >= 1")
        if not (isinstance(self.max_steps, int) and self.max_steps >= 1):
            raise ValueError(f"beacon_walk: max_steps={self.max_steps!r}; expected an int >= 1")


@struct.dataclass
class BeaconWalkState:
    x: jax.Array = state_field("f32")  # f32[envs, agents]
    beacon: jax.Array = state_field("f32", "env")  # f32[envs]
    timestep: jax.Array = state_field("i32", "env")  # i32[envs]
    episode_return: jax.Array = state_field("f32")  # f32[envs, agents]


def _fresh(p, key_data, num_envs):
    return dict(x=agent_uniform(key_data, num_envs, p.num_agents, 0),
                beacon=agent_uniform(key_data, num_envs, 1, 1)[:, 0])


def observe(p, s):
    return jnp.stack([s.beacon[:, None] - s.x, s.x], axis=-1)


def reference_reset(p, key_data, num_envs):
    s = BeaconWalkState(**_fresh(p, key_data, num_envs),
                        timestep=jnp.zeros((num_envs,), jnp.int32),
                        episode_return=jnp.zeros((num_envs, p.num_agents), jnp.float32))
    return observe(p, s), s


def reference_step(p, key_data, s, actions, autoreset=True):
    m = actions[..., 0]
    h = F32(p.step_size)
    dx = jnp.where(m == 1, h, jnp.where(m == 2, -h, F32(0)))
    x = jnp.clip(s.x + dx, F32(0), F32(1))
    reward = -jnp.abs(x - s.beacon[:, None])
    terminated = jnp.zeros(x.shape[:1], bool)
    return finish_step(s, dict(x=x, beacon=s.beacon), _fresh(p, key_data, x.shape[0]), reward,
                       terminated, p.max_steps, partial(observe, p), autoreset)


SPEC = EnvSpec(
    name="beacon_walk",
    header=Path(__file__).with_name("beacon_walk.h"),
    params_type=BeaconWalkParams,
    state_type=BeaconWalkState,
    num_agents=lambda p: p.num_agents,
    obs_dim=lambda p: 2,
    nvec=lambda p: (3,),
    reference_reset=reference_reset,
    reference_step=reference_step,
    obs_bounds=lambda p: (np.array([-1, 0], np.float32), np.array([1, 1], np.float32)),
    time_limit="max_steps",
)
ENV = jaxwarp.register_spec(SPEC)
'''

PAGE = """\
# beacon_walk

A throwaway env of `tests/test_new_env.py`: its files are `beacon_walk.h`
and `beacon_walk.py`; `jaxwarp.make("beacon_walk", backend="cpu")` builds it.

## Rules

Agents on [0, 1] walk toward one beacon per env, `step_size` per step; the
episode is truncated after `max_steps` steps.

## Spaces

| | shape | meaning |
|---|---|---|
| observation | `f32[envs, 2, 2]` | beacon - x, x |
| action | `i32[envs, 2, 1]`, nvec `(3,)` | 0 stay, 1 right, 2 left |

## Params

| param | default | meaning |
|---|---|---|
| `num_agents` | `2` | walkers per env |
| `step_size` | `0.125` | distance of one move |
| `max_steps` | `6` | steps per episode |
"""


def _parametrize_grid(fn) -> list[tuple[dict, tuple]]:
    """(kwargs, marks) for every combination of `fn`'s parametrize marks
    but the one over ``name``."""
    axes = []
    for mark in getattr(fn, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        argnames, values = mark.args[0], mark.args[1]
        names = [a.strip() for a in argnames.split(",")] if isinstance(argnames, str) \
            else list(argnames)
        if names == ["name"]:
            continue  # the env: the caller's
        axis = []
        for v in values:
            marks = ()
            if hasattr(v, "values") and hasattr(v, "marks"):  # pytest.param(...)
                v, marks = (v.values[0] if len(v.values) == 1 else v.values), tuple(v.marks)
            axis.append((dict(zip(names, v if len(names) > 1 else (v,))), marks))
        axes.append(axis)
    out = []
    for combo in itertools.product(*axes):
        kwargs, marks = {}, ()
        for k, m in combo:
            kwargs.update(k)
            marks += m
        out.append((kwargs, marks))
    return out


def per_env_cases(module, envs, prefix: str = "test_") -> list:
    """pytest.param(check, kwargs) for every function of `module` named
    ``prefix*`` whose ``name`` parameter is parametrized over `envs` (the
    module's list of envs), one per combination of its other parameters,
    ``name`` left out (the caller passes its env) and marks (gpu) kept. A
    check that takes a parameter no parametrize gives (a fixture) fails here,
    by name, rather than being left out."""
    cases = []
    for fname, fn in vars(module).items():
        if not (fname.startswith(prefix) and inspect.isfunction(fn)):
            continue
        if not any(m.name == "parametrize" and m.args[0] == "name" and m.args[1] is envs
                   for m in getattr(fn, "pytestmark", [])):
            continue
        params = set(inspect.signature(fn).parameters) - {"name"}
        for kwargs, marks in _parametrize_grid(fn):
            assert params == set(kwargs), (
                f"{module.__name__}.{fname} takes {sorted(params - set(kwargs))}, which no "
                "parametrize gives: tests/test_new_env.py cannot run it on a new env")
            label = "-".join(str(v) if not isinstance(v, tuple) else "-".join(v)
                             for v in kwargs.values())
            cases.append(pytest.param(fn, kwargs, marks=marks,
                                      id=f"{fname}[{label}]" if label else fname))
    return cases


CONFORMANCE = per_env_cases(conformance, conformance.ENVS)
PAGE_CHECKS = per_env_cases(env_docs, env_docs.BUILTIN, prefix="test_page_")


def _env_folder() -> Path:
    """The env's three files in a temporary folder named by their contents:
    the same path on every run, so that its library, compiled once, comes from
    the build cache (whose key holds the header's path) on later runs."""
    files = {"beacon_walk.h": HEADER, "beacon_walk.py": MODULE, "beacon_walk.md": PAGE}
    digest = hashlib.sha256("".join(files.values()).encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / f"jaxwarp-test-new-env-{digest}"
    folder.mkdir(exist_ok=True)
    for file, text in files.items():
        path = folder / file
        if not path.is_file() or path.read_text() != text:
            tmp = folder / f".{file}.{os.getpid()}"
            tmp.write_text(text)
            os.replace(tmp, path)  # whole or not at all (another run may read it)
    return folder


@pytest.fixture(scope="module")
def new_env() -> str:
    """beacon_walk written to a temporary folder and registered as a user env
    is (``env_module=PATH.py``); unregistered afterwards."""
    folder = _env_folder()
    saved = dict(registry._REGISTRY), dict(registry._SPECS)
    modules = set(sys.modules)
    try:
        import_env_module(str(folder / "beacon_walk.py"))
        yield NAME
    finally:
        registry._REGISTRY.clear()
        registry._REGISTRY.update(saved[0])
        registry._SPECS.clear()
        registry._SPECS.update(saved[1])
        for m in set(sys.modules) - modules:
            if m.startswith("jaxwarp_user_beacon_walk"):
                del sys.modules[m]


def test_the_suites_have_checks_to_run():
    # The conformance suite's per-env checks (shapes, determinism, vmap,
    # backends over whole episodes, in place, errors, spaces, ...), the pages' checks.
    assert len({c.values[0] for c in CONFORMANCE}) >= 15, CONFORMANCE
    assert {c.values[0].__name__ for c in PAGE_CHECKS} >= {
        "test_page_spaces_section_states_the_default_shapes",
        "test_page_params_table_lists_every_field_with_its_default",
        "test_page_names_its_files_and_configs"}


def test_a_new_env_is_registered_but_not_a_builtin(new_env):
    assert new_env in jaxwarp.registered_envs()
    assert new_env in registry.contract_envs()
    assert new_env not in registry.builtin_envs()
    assert not any(s.partition(".")[0] == new_env for s in layouts.builtin_layouts())
    env = jaxwarp.make(new_env, backend="jax")
    assert (env.num_agents, env.obs_dim, tuple(env.action_space.nvec)) == (2, 2, (3,))


@pytest.mark.parametrize("check, kwargs", CONFORMANCE)
def test_conformance(new_env, check, kwargs):
    check(name=new_env, **kwargs)


def test_its_page_is_found(new_env):
    page = registry.env_doc(new_env)
    assert page is not None and page.name == "beacon_walk.md"
    assert page.parent == Path(registry.env_spec(new_env).header).parent


@pytest.mark.parametrize("check, kwargs", PAGE_CHECKS)
def test_its_page(new_env, check, kwargs):
    check(name=new_env, **kwargs)


def test_it_trains(new_env):
    """A tiny PPO run on the cpu backend, the env named in the config as a
    user names it (env_module is imported again: a no-op)."""
    module = sys.modules["jaxwarp_user_beacon_walk"].__file__
    c = config_from_dict({"env": new_env, "env_module": module, "backend": "cpu",
                          "num_envs": 4, "num_steps": 8, "total_env_steps": 128,
                          "num_minibatches": 1, "update_epochs": 1, "devices": 1,
                          "policies": {"agent": {"hidden_sizes": [8]}}})
    with jax.default_device(jax.devices("cpu")[0]):
        _, metrics = jax.jit(make_train(c))(jax.random.PRNGKey(0))
    loss = np.asarray(metrics["agent/loss"])
    assert loss.shape == (4,) and np.isfinite(loss).all(), loss
    returns = np.asarray(metrics["agent/episode_return"])
    assert np.isfinite(returns).all() and (returns <= 0).all(), returns
