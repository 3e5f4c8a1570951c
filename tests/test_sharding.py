"""Sharded envs (`jaxwarp.sharding`) against the unsharded env, on 4 CPU devices.

XLA's host device count is fixed when jax initialises, so the multi-device
checks run once, in a subprocess started with
``XLA_FLAGS=--xla_force_host_platform_device_count=4`` (this file run as a
script), which prints one JSON report; the tests below assert its entries.
For every registered env on the "cpu" and "jax" backends:

* a jitted 40-step `lax.scan` rollout (random actions from a fixed key, with
  auto-resets) through `ShardedEnv` on meshes of 1, 2 and 4 devices (Auto
  axes; and 4 devices from `jax.make_mesh`, Explicit axes) gives bit for bit
  the unsharded rollout: every step's obs, reward, done, info and the final
  state;
* every output of reset/step is sharded over the mesh (`.sharding`);
* the compiled sharded step has no cross-device op (all-gather, all-to-all,
  collective-permute, all-reduce, reduce-scatter) and, on the cpu backend,
  one launch of the step kernel; on the jax backend, only the ops listed in
  `JAX_BACKEND_COLLECTIVES`.

Plus: an env axis split over two mesh axes, the sampler (bit for bit on
every backend; the deprecated per-shard keys), `shard_state`, and the error
messages. The plain-jit path (no ShardedEnv) is tests/test_partitioning.py.
"""

from __future__ import annotations

import json
import sys
import time

import pytest
from _workers import leaves_differ, not_split, run_workers
from _small import SMALL_TAG

DEVICES = 4
WORKERS = 2  # subprocesses, each on its share of the (env, backend) pairs
NUM_ENVS = 8
STEPS = 40
SMALL = {"tag_continuous": dict(SMALL_TAG, episode_length=30)}
# Cross-device ops that XLA inserts when it partitions an env's pure-JAX
# reference (backend "jax", no shard_map) on 4 CPU devices. None since the
# reference's k-nearest top_k (tag_continuous), which XLA's partitioner
# all-gathered, runs under the envs' own partitioning rule. Strict: a change
# either way fails, so that this stays true.
JAX_BACKEND_COLLECTIVES: dict[str, list[str]] = {}


# ---------------------------------------------------------------------------
# The subprocess: python tests/test_sharding.py --worker
# ---------------------------------------------------------------------------
def _worker(part: int, parts: int) -> dict:
    """The report of this worker's share of (env, backend) pairs; worker 0
    also checks the rest (sampler, two mesh axes, shard_state, errors)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh

    import jaxwarp
    from jaxwarp import sharding

    assert jax.device_count() == DEVICES, jax.devices()
    devices = jax.devices()
    meshes = {f"auto{d}": Mesh(np.array(devices[:d]), ("envs",)) for d in (1, 2, 4)}
    meshes["explicit4"] = jax.make_mesh((DEVICES,), ("envs",))  # Explicit axes by default
    report: dict = {"envs": {}, "jax_version": jax.__version__,
                    "axis_types": {k: str(getattr(m, "axis_types", None))
                                   for k, m in meshes.items()}}
    key = jax.random.key(2024)

    leaves_equal, sharded_over = leaves_differ, not_split

    def rollout_fn(e):
        nvec = jnp.asarray(np.asarray(e.action_space.nvec), jnp.int32)
        shape = (NUM_ENVS, e.num_agents, nvec.shape[0])

        def run(key):
            obs, state = e.reset(key, NUM_ENVS)

            def body(carry, t):
                obs, state = carry
                k_act, k_step = jax.random.split(jax.random.fold_in(key, t))
                actions = jax.random.randint(k_act, shape, 0, nvec, jnp.int32)
                obs, state, reward, done, info = e.step(k_step, state, actions)
                return (obs, state), (obs, reward, done, info)

            (obs, state), ys = jax.lax.scan(body, (obs, state), jnp.arange(STEPS))
            return state, ys
        return jax.jit(run)

    pairs = [(n, b) for b in ("cpu", "jax") for n in jaxwarp.registered_envs()]
    for name, backend in pairs[part::parts]:
        t0 = time.perf_counter()
        env = jaxwarp.make(name, backend=backend, **SMALL.get(name, {}))
        entry: dict = {"equal": {}, "resets": 0}
        want = rollout_fn(env)(key)
        entry["resets"] = int(np.asarray(want[1][2]).sum())
        for mname, mesh in meshes.items():
            senv = sharding.ShardedEnv(env, mesh)
            compiled = rollout_fn(senv).lower(key).compile()  # run what is inspected
            got = compiled(key)
            entry["equal"][mname] = leaves_equal(want, got)
            # got = (final state, per-step outputs stacked on a leading step axis)
            entry.setdefault("unsharded_outputs", {})[mname] = (
                sharded_over(got[0], mesh) + sharded_over(got[1], mesh, axis=1))
            if mname == "auto4":
                entry["rollout_collectives"] = sharding.collectives_in(compiled.as_text())
        # One reset and step on 4 devices: outputs placed, compiled step clean.
        mesh = meshes["auto4"]
        senv = sharding.ShardedEnv(env, mesh)
        obs, state = senv.reset(key, NUM_ENVS)
        nvec = np.asarray(env.action_space.nvec)
        actions = jnp.asarray(np.random.default_rng(0).integers(
            0, nvec, (NUM_ENVS, env.num_agents, len(nvec))), jnp.int32)
        step = jax.jit(senv.step).lower(key, state, actions).compile()
        out = step(key, state, actions)
        entry["step_unsharded_outputs"] = sharded_over(((obs, state), out), mesh)
        hlo = step.as_text()
        entry["collectives"] = sharding.collectives_in(hlo)
        entry["step_launches"] = (hlo.count(f'custom_call_target="{env._prefix}_step_cpu"')
                                  if backend == "cpu" else None)
        entry["seconds"] = round(time.perf_counter() - t0, 2)
        report["envs"][f"{name}/{backend}"] = entry
    if part != 0:
        return report

    # The env axis split over two mesh axes (major first), on the cpu backend.
    env = jaxwarp.make("cartpole", backend="cpu")
    mesh2d = Mesh(np.array(devices).reshape(2, 2), ("hosts", "gpus"))
    want = rollout_fn(env)(key)
    senv = sharding.ShardedEnv(env, mesh2d, axis=("hosts", "gpus"))
    report["two_axes_equal"] = leaves_equal(want, rollout_fn(senv)(key))
    # ... and over one axis of a 2-D mesh, replicated over the other.
    senv = sharding.ShardedEnv(env, mesh2d, axis="gpus")
    report["one_of_two_axes_equal"] = leaves_equal(want, rollout_fn(senv)(key))

    # The sampler.
    nvec = (5, 3)
    logits = jax.random.normal(jax.random.key(7), (NUM_ENVS, 6, sum(nvec)))
    skey = jax.random.key(11)
    sampler_report: dict = {"equal": {}, "collectives": {}}
    for backend in ("jax", "cpu"):
        ref = jaxwarp.sample_actions(skey, logits, nvec, backend=backend)
        for mname, mesh in meshes.items():
            got = sharding.sample_actions(skey, logits, nvec, mesh, backend=backend)
            sampler_report["equal"][f"{backend}/{mname}"] = (leaves_equal(ref, got)
                                                             + sharded_over(got, mesh))
        mesh = meshes["auto4"]
        sampler_report["collectives"][backend] = sharding.collectives_in(
            jax.jit(lambda k, x, b=backend, m=mesh: sharding.sample_actions(k, x, nvec, m,
                                                                            backend=b))
            .lower(skey, logits).compile().as_text())
    report["sampler"] = sampler_report

    # shard_state and the errors.
    env = jaxwarp.make("cartpole", backend="cpu")
    obs, state = env.reset(key, NUM_ENVS)
    placed = sharding.shard_state((obs, state), meshes["auto4"])
    report["shard_state_unsharded"] = sharded_over(placed, meshes["auto4"])
    report["shard_state_equal"] = leaves_equal((obs, state), placed)
    senv = sharding.ShardedEnv(env, meshes["auto4"])
    errors = {}

    def error_of(f):
        try:
            f()
        except Exception as e:  # noqa: BLE001 (the report records the type)
            return [type(e).__name__, str(e)]
        return None

    errors["reset_num_envs"] = error_of(lambda: senv.reset(key, 6))
    _, s6 = env.reset(key, 6)
    errors["step_num_envs"] = error_of(
        lambda: senv.step(key, s6, jnp.zeros((6, 1, 1), jnp.int32)))
    errors["step_actions"] = error_of(
        lambda: senv.step(key, placed[1], jnp.zeros((4, 1, 1), jnp.int32)))
    errors["missing_axis"] = error_of(
        lambda: sharding.ShardedEnv(env, Mesh(np.array(devices), ("x",))))
    errors["missing_axis_named"] = error_of(
        lambda: sharding.ShardedEnv(env, meshes["auto4"], axis="batch"))
    errors["shard_state"] = error_of(lambda: sharding.shard_state(s6, meshes["auto4"]))
    errors["sample_rows"] = error_of(lambda: sharding.sample_actions(
        skey, logits[:6], nvec, meshes["auto4"], backend="jax"))
    errors["not_a_mesh"] = error_of(lambda: sharding.ShardedEnv(env, devices))
    report["errors"] = errors
    report["passthrough"] = [senv.num_agents == env.num_agents,
                             senv.action_space == env.action_space,
                             senv.params == env.params, senv.backend == env.backend,
                             senv.obs_dim == env.obs_dim]
    return report


# ---------------------------------------------------------------------------
# The tests.
# ---------------------------------------------------------------------------
def _envs() -> tuple[str, ...]:
    import jaxwarp

    return jaxwarp.registered_envs()


@pytest.fixture(scope="module")
def report() -> dict:
    t0 = time.perf_counter()
    # Mostly XLA compiles (single-threaded): one worker per CPU core, at most WORKERS.
    report = run_workers(__file__, DEVICES, WORKERS, "sharding")
    report["wall_seconds"] = round(time.perf_counter() - t0, 1)
    return report


@pytest.mark.parametrize("backend", ["cpu", "jax"])
@pytest.mark.parametrize("name", _envs())
def test_sharded_rollout_is_bitwise_unsharded(report, name, backend):
    entry = report["envs"][f"{name}/{backend}"]
    assert set(entry["equal"]) == {"auto1", "auto2", "auto4", "explicit4"}
    for mesh, mismatched in entry["equal"].items():
        assert mismatched == [], f"{name}/{backend} on {mesh}: leaves differ: {mismatched}"
    for mesh, leaves in entry["unsharded_outputs"].items():
        assert leaves == [], f"{name}/{backend} on {mesh}: not sharded over the mesh: {leaves}"
    assert entry["step_unsharded_outputs"] == []


@pytest.mark.parametrize("backend", ["cpu", "jax"])
@pytest.mark.parametrize("name", _envs())
def test_no_collectives_in_sharded_step(report, name, backend):
    entry = report["envs"][f"{name}/{backend}"]
    if backend == "cpu":
        assert entry["collectives"] == [], entry["collectives"]
        assert entry["rollout_collectives"] == [], entry["rollout_collectives"]
        assert entry["step_launches"] == 1  # one launch per device, on its own envs
    else:
        expected = JAX_BACKEND_COLLECTIVES.get(name, [])
        assert entry["collectives"] == expected
        assert entry["rollout_collectives"] == expected


def test_rollouts_reach_auto_reset(report):
    # The comparisons cover the masked reset of some envs at least.
    for name in ("tag_continuous", "cartpole"):
        assert report["envs"][f"{name}/cpu"]["resets"] > 0


def test_env_axis_over_two_mesh_axes(report):
    assert report["two_axes_equal"] == []
    assert report["one_of_two_axes_equal"] == []


def test_sampler_bitwise_on_every_backend(report):
    # The kernels count draws from each row's global index (the row offset).
    s = report["sampler"]
    assert set(s["equal"]) == {f"{b}/{m}" for b in ("jax", "cpu")
                               for m in ("auto1", "auto2", "auto4", "explicit4")}
    for case, bad in s["equal"].items():
        assert bad == [], f"sampler {case}: {bad}"
    assert s["collectives"] == {"jax": [], "cpu": []}


def test_shard_state(report):
    assert report["shard_state_unsharded"] == []
    assert report["shard_state_equal"] == []


@pytest.mark.parametrize("case, kind, words", [
    ("reset_num_envs", "ValueError", ["num_envs", "divisible", "'envs'", "4", "6"]),
    ("step_num_envs", "ValueError", ["state", "divisible"]),
    ("step_actions", "ValueError", ["actions", "(8, 1, 1)"]),
    ("missing_axis", "ValueError", ["axis", "'envs'", "('x',)"]),
    ("missing_axis_named", "ValueError", ["axis", "'batch'"]),
    ("shard_state", "ValueError", ["tree", "divisible"]),
    ("sample_rows", "ValueError", ["logits.shape[0]", "divisible"]),
    ("not_a_mesh", "TypeError", ["mesh"]),
])
def test_errors(report, case, kind, words):
    err = report["errors"][case]
    assert err is not None, f"{case}: no error"
    assert err[0] == kind, err
    for w in words:
        assert w in err[1], (w, err[1])


def test_passthrough(report):
    assert all(report["passthrough"]), report["passthrough"]


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    print(json.dumps(_worker(int(sys.argv[2]), int(sys.argv[3]))))
