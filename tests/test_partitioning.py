"""The partitioning rule of the FFI calls under plain ``jax.jit``, on 4 CPU devices.

No `ShardedEnv` here: a user places env-sharded arrays
(``NamedSharding(mesh, P("envs"))``) and jits the env's own ``step``/``reset``
and `jaxwarp.sample_actions`. The rule (`jaxwarp._ffi.env_partitioned_call`)
must then give one launch per device over its own envs with the global env
offset: no collective in the compiled HLO, outputs split like the inputs, and
results bit for bit those of one device. Also what the rule says for the
other cases: replicated inputs (every device computes all envs, no
collective), inputs split along another axis (all-gathered first, then equal),
vmap over keys (the batch axis passes through), Explicit mesh axes in
context (``jax.set_mesh``), the GSPMD partitioner; and every env's pure-JAX
reference (backend "jax") under the same plain jit, partitioned by XLA with
no collective either.

The device count is fixed when jax initialises, so the checks run in a
subprocess started with ``XLA_FLAGS=--xla_force_host_platform_device_count=4``
(this file run as a script) that prints one JSON report; the tests assert it.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from _workers import leaves_differ, not_split, run_workers
from _small import SMALL_TAG

DEVICES = 4
NUM_ENVS = 8
SMALL = {"tag_continuous": dict(SMALL_TAG, episode_length=30)}


# ---------------------------------------------------------------------------
# The subprocess: python tests/test_partitioning.py --worker PART PARTS
# ---------------------------------------------------------------------------
def _worker(part: int, parts: int) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import jaxwarp
    from jaxwarp import sharding

    assert jax.device_count() == DEVICES, jax.devices()
    devices = jax.devices()
    meshes = {d: Mesh(np.array(devices[:d]), ("envs",)) for d in (1, 2, 4)}
    key = jax.random.key(5)
    report: dict = {"envs": {}, "shardy": bool(jax.config.jax_use_shardy_partitioner)}

    differ = leaves_differ

    def not_replicated(tree):
        return [jax.tree_util.keystr(p) for p, x in jax.tree_util.tree_leaves_with_path(tree)
                if not x.sharding.is_fully_replicated]

    def compiled(f, *args, **jit_kw):
        c = jax.jit(f, **jit_kw).lower(*args).compile()
        return c, c(*args), c.as_text()

    def stepped(env, seed):
        """A reset state of NUM_ENVS envs, random actions (NumPy seed `seed`) and
        the step's outputs on them, unsplit."""
        nvec = np.asarray(env.action_space.nvec)
        actions = jnp.asarray(np.random.default_rng(seed).integers(
            0, nvec, (NUM_ENVS, env.num_agents, len(nvec))), jnp.int32)
        _, state = env.reset(key, NUM_ENVS)
        return state, actions, env.step(key, state, actions)

    names = jaxwarp.registered_envs()
    for name in names[part::parts]:
        env = jaxwarp.make(name, backend="cpu", **SMALL.get(name, {}))
        target = f'custom_call_target="{env._prefix}_step_cpu"'
        nvec = np.asarray(env.action_space.nvec)
        shape = (NUM_ENVS, env.num_agents, len(nvec))
        actions = jnp.asarray(np.random.default_rng(0).integers(0, nvec, shape), jnp.int32)
        obs, state = env.reset(key, NUM_ENVS)
        # A state some steps in, so that the step compared is not just after reset.
        for t in range(3):
            _, state, *_ = env.step(jax.random.fold_in(key, t), state, actions)
        want = env.step(key, state, actions)
        entry: dict = {}
        for d, mesh in meshes.items():
            split = NamedSharding(mesh, P("envs"))
            s_state, s_actions = jax.device_put((state, actions), split)
            _, got, hlo = compiled(env.step, key, s_state, s_actions)
            _, reset_got, reset_hlo = compiled(lambda k, e=env: e.reset(k, NUM_ENVS), key,
                                               out_shardings=split)
            entry[f"step{d}"] = {"differ": differ(want, got), "not_split": not_split(got, mesh),
                                 "collectives": sharding.collectives_in(hlo),
                                 "launches": hlo.count(target)}
            entry[f"reset{d}"] = {"differ": differ((obs, reset_got[1]), reset_got)
                                  + differ(env.reset(key, NUM_ENVS), reset_got),
                                  "not_split": not_split(reset_got, mesh),
                                  "collectives": sharding.collectives_in(reset_hlo)}
        mesh = meshes[4]
        # Replicated inputs: every device steps every env; nothing moves.
        rep = NamedSharding(mesh, P())
        r_state, r_actions = jax.device_put((state, actions), rep)
        _, got, hlo = compiled(env.step, key, r_state, r_actions)
        entry["replicated"] = {"differ": differ(want, got), "not_replicated": not_replicated(got),
                               "collectives": sharding.collectives_in(hlo)}
        # vmap over keys, state split over envs: the batch axis passes through.
        keys = jax.random.split(key, 2)
        want_v = jax.tree.map(lambda *x: jnp.stack(x),
                              *[env.step(k, state, actions) for k in keys])
        s_state, s_actions = jax.device_put((state, actions), NamedSharding(mesh, P("envs")))
        _, got, hlo = compiled(jax.vmap(env.step, in_axes=(0, None, None)), keys, s_state,
                               s_actions)
        entry["vmap"] = {"differ": differ(want_v, got), "not_split": not_split(got, mesh, 1),
                         "collectives": sharding.collectives_in(hlo)}
        # The pure-JAX reference under the same plain jit: XLA partitions it
        # (tag_continuous's k-nearest top_k under the envs' rule), no collective.
        jenv = jaxwarp.make(name, backend="jax", **SMALL.get(name, {}))
        j_want = jax.jit(jenv.step)(key, state, actions)  # one device, the same program
        s_state, s_actions = jax.device_put((state, actions), NamedSharding(mesh, P("envs")))
        _, got, hlo = compiled(jenv.step, key, s_state, s_actions)
        _, got_v, hlo_v = compiled(jax.vmap(jenv.step, in_axes=(0, None, None)), keys, s_state,
                                   s_actions)
        j_want_v = jax.jit(jax.vmap(jenv.step, in_axes=(0, None, None)))(keys, state, actions)
        # (Outputs placed as XLA chooses: cartpole's constant reward is replicated.)
        entry["jax_step"] = {"differ": differ(j_want, got) + differ(j_want_v, got_v),
                             "collectives": sharding.collectives_in(hlo)
                             + sharding.collectives_in(hlo_v)}
        report["envs"][name] = entry
    if part != 0:
        return report

    # Inputs split along the agent axis: the rule replicates that axis first
    # (an all-gather), then the results are the unsharded ones.
    env = jaxwarp.make("mpe_simple_spread", backend="cpu", num_agents=4, num_landmarks=4)
    state, actions, want = stepped(env, 1)
    agents = Mesh(np.array(devices[:2]), ("agents",))
    by_agent = NamedSharding(agents, P(None, "agents"))
    a_state = jax.tree.map(lambda x: jax.device_put(x, by_agent if x.ndim >= 2 else
                                                    NamedSharding(agents, P())), state)
    a_actions = jax.device_put(actions, by_agent)
    _, got, hlo = compiled(env.step, key, a_state, a_actions)
    report["agent_split"] = {"differ": differ(want, got),
                             "collectives": sharding.collectives_in(hlo)}

    # A whole rollout under plain jit: reset pinned to P("envs"), scan of steps.
    env = jaxwarp.make("cartpole", backend="cpu")
    split = NamedSharding(meshes[4], P("envs"))

    def rollout(key, pin):
        _, state = env.reset(key, NUM_ENVS)
        if pin:
            state = jax.lax.with_sharding_constraint(state, split)

        def body(state, t):
            k_act, k_step = jax.random.split(jax.random.fold_in(key, t))
            a = jax.random.randint(k_act, (NUM_ENVS, 1, 1), 0, 2, jnp.int32)
            obs, state, reward, done, _ = env.step(k_step, state, a)
            return state, (obs, reward, done)
        return jax.lax.scan(body, state, jnp.arange(30))

    want = jax.jit(rollout, static_argnums=1)(key, False)
    _, got, hlo = compiled(lambda k: rollout(k, True), key)
    report["rollout"] = {"differ": differ(want, got), "collectives": sharding.collectives_in(hlo),
                         "not_split": not_split(got[1], meshes[4], 1),
                         "resets": int(np.asarray(want[1][2]).sum())}

    # The sampler: plain jit of jaxwarp.sample_actions over split logits.
    nvec = (5, 3, 70)  # 70 > 64: the CUDA warp kernel's heads too
    logits = jax.random.normal(jax.random.key(7), (NUM_ENVS, 6, sum(nvec)))
    skey = jax.random.key(11)
    samp: dict = {}
    for backend in ("cpu", "jax"):
        ref = jaxwarp.sample_actions(skey, logits, nvec, backend=backend)
        for d, mesh in meshes.items():
            x = jax.device_put(logits, NamedSharding(mesh, P("envs")))
            _, got, hlo = compiled(lambda k, x, b=backend: jaxwarp.sample_actions(k, x, nvec, b),
                                   skey, x)
            via = sharding.sample_actions(skey, logits, nvec, mesh, backend=backend)
            samp[f"{backend}{d}"] = {"differ": differ(ref, got) + differ(ref, via),
                                     "not_split": not_split(got, mesh) + not_split(via, mesh),
                                     "collectives": sharding.collectives_in(hlo)}
    mesh = meshes[4]
    ref = jaxwarp.sample_actions(skey, logits, nvec, backend="cpu")
    # Replicated logits: every device samples every row, the same bits.
    _, got, hlo = compiled(lambda k, x: jaxwarp.sample_actions(k, x, nvec, "cpu"), skey,
                           jax.device_put(logits, NamedSharding(mesh, P())))
    samp["replicated"] = {"differ": differ(ref, got), "not_replicated": not_replicated(got),
                          "collectives": sharding.collectives_in(hlo)}
    # vmap over keys (one member per key, each with its own row offsets).
    skeys = jax.random.split(skey, 3)
    want_v = jax.vmap(lambda k: jaxwarp.sample_actions(k, logits, nvec, "cpu"))(skeys)
    _, got, hlo = compiled(jax.vmap(lambda k, x: jaxwarp.sample_actions(k, x, nvec, "cpu"),
                                    in_axes=(0, None)),
                           skeys, jax.device_put(logits, NamedSharding(mesh, P("envs"))))
    samp["vmap"] = {"differ": differ(want_v, got), "not_split": not_split(got, mesh, 1),
                    "collectives": sharding.collectives_in(hlo)}
    # jax's original (non-partitionable) threefry layout: the counters depend
    # on the whole draw's size, which the kernels get as draw_rows.
    with jax.threefry_partitionable(False):
        ref_np = jaxwarp.sample_actions(skey, logits, nvec, backend="cpu")
        ref_jax = jaxwarp.sample_actions(skey, logits, nvec, backend="jax")
        _, got, hlo = compiled(lambda k, x: jaxwarp.sample_actions(k, x, nvec, "cpu"), skey,
                               jax.device_put(logits, NamedSharding(mesh, P("envs"))))
    samp["not_partitionable"] = {"differ": differ(ref_np, got),
                                 "actions_equal_jax": bool(np.array_equal(ref_np[0], ref_jax[0])),
                                 "collectives": sharding.collectives_in(hlo)}
    report["sampler"] = samp

    # Explicit axes in context (jax.set_mesh): the op runs on Auto axes, its
    # outputs typed like the split inputs; no collective either.
    explicit = jax.make_mesh((DEVICES,), ("envs",))
    env = jaxwarp.make("mpe_simple_spread", backend="cpu")
    state, actions, want = stepped(env, 3)
    want_s = jaxwarp.sample_actions(skey, logits, (5, 3, 70), backend="cpu")
    split = NamedSharding(explicit, P("envs"))
    with jax.set_mesh(explicit):
        args = jax.device_put((state, actions), split)
        _, got, hlo = compiled(env.step, key, *args)
        _, got_s, hlo_s = compiled(lambda k, x: jaxwarp.sample_actions(k, x, (5, 3, 70), "cpu"),
                                   skey, jax.device_put(logits, split))
    report["set_mesh"] = {"differ": differ(want, got) + differ(want_s, got_s),
                          "not_split": not_split(got, explicit) + not_split(got_s, explicit),
                          "collectives": sharding.collectives_in(hlo)
                          + sharding.collectives_in(hlo_s),
                          "typed": [str(jax.typeof(x).sharding.spec) for x in
                                    jax.tree.leaves((got, got_s))]}

    # The GSPMD partitioner (the rule's infer_sharding_from_operands).
    jax.config.update("jax_use_shardy_partitioner", False)
    try:
        env = jaxwarp.make("mpe_simple_spread", backend="cpu")
        state, actions, want = stepped(env, 2)
        split = NamedSharding(meshes[4], P("envs"))
        _, got, hlo = compiled(env.step, key, *jax.device_put((state, actions), split))
        report["gspmd"] = {"differ": differ(want, got), "not_split": not_split(got, meshes[4]),
                           "collectives": sharding.collectives_in(hlo)}
    finally:
        jax.config.update("jax_use_shardy_partitioner", True)
    return report


# ---------------------------------------------------------------------------
# The tests.
# ---------------------------------------------------------------------------
def _envs() -> tuple[str, ...]:
    import jaxwarp

    return jaxwarp.registered_envs()


@pytest.fixture(scope="module")
def report() -> dict:
    return run_workers(__file__, DEVICES, 2, "partitioning")


def _clean(entry: dict) -> None:
    """Bitwise equal, no collective, outputs placed as the rule says."""
    assert entry["differ"] == [], entry["differ"]
    assert entry["collectives"] == [], entry["collectives"]
    for k in ("not_split", "not_replicated"):
        if k in entry:
            assert entry[k] == [], (k, entry[k])


@pytest.mark.parametrize("devices", [1, 2, 4])
@pytest.mark.parametrize("name", _envs())
def test_plain_jit_step_over_split_state(report, name, devices):
    entry = report["envs"][name][f"step{devices}"]
    _clean(entry)
    assert entry["launches"] == 1  # one launch per device, over its own envs


@pytest.mark.parametrize("devices", [1, 2, 4])
@pytest.mark.parametrize("name", _envs())
def test_plain_jit_reset_with_split_outputs(report, name, devices):
    _clean(report["envs"][name][f"reset{devices}"])


@pytest.mark.parametrize("name", _envs())
def test_replicated_state_steps_every_env_on_every_device(report, name):
    _clean(report["envs"][name]["replicated"])


@pytest.mark.parametrize("name", _envs())
def test_vmap_over_keys_keeps_the_env_split(report, name):
    _clean(report["envs"][name]["vmap"])


@pytest.mark.parametrize("name", _envs())
def test_pure_jax_step_over_split_state_has_no_collective(report, name):
    # The reference backend on 4 devices, plain jit and vmap over keys:
    # partitioned by XLA (top_k by the envs' rule), bit for bit, no collective.
    _clean(report["envs"][name]["jax_step"])


def test_agent_axis_split_is_gathered_then_equal(report):
    entry = report["agent_split"]
    assert entry["differ"] == []
    assert "all-gather" in entry["collectives"]


def test_rollout_under_plain_jit(report):
    _clean(report["rollout"])
    assert report["rollout"]["resets"] > 0  # the masked auto-reset is compared too


@pytest.mark.parametrize("devices", [1, 2, 4])
@pytest.mark.parametrize("backend", ["cpu", "jax"])
def test_sampler_split_rows_bitwise(report, backend, devices):
    _clean(report["sampler"][f"{backend}{devices}"])


@pytest.mark.parametrize("case", ["replicated", "vmap", "not_partitionable"])
def test_sampler_other_layouts(report, case):
    _clean(report["sampler"][case])


def test_sampler_not_partitionable_matches_jax(report):
    assert report["sampler"]["not_partitionable"]["actions_equal_jax"]


def test_explicit_axes_in_context(report):
    entry = report["set_mesh"]
    _clean(entry)
    assert all(t.startswith("P('envs'") for t in entry["typed"]), entry["typed"]


def test_gspmd_partitioner(report):
    _clean(report["gspmd"])


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    print(json.dumps(_worker(int(sys.argv[2]), int(sys.argv[3]))))


@pytest.mark.parametrize("offset, exc", [(None, TypeError), ("0", TypeError), (1.0, TypeError),
                                         (True, TypeError), (2**32, ValueError),
                                         (-1, ValueError), (np.zeros(2, np.int32), ValueError)])
def test_env_offset_is_checked(offset, exc):
    # The offset word of the kernels' keys is u32: out-of-range values would
    # wrap to another env's random stream.
    import jax

    import jaxwarp

    env = jaxwarp.make("cartpole", backend="cpu")
    with pytest.raises(exc, match="env_offset"):
        env.reset(jax.random.key(0), 4, env_offset=offset)


def test_env_offset_within_range_is_the_global_env_index():
    import jax

    import jaxwarp

    env = jaxwarp.make("cartpole", backend="cpu")
    key = jax.random.key(0)
    whole, _ = env.reset(key, 8)
    for offset in (4, np.int64(4), jax.numpy.int32(4)):
        part, _ = env.reset(key, 4, env_offset=offset)
        np.testing.assert_array_equal(np.asarray(part), np.asarray(whole[4:]))
