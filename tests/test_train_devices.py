"""Training over several devices and processes (issue 12), on CPU.

XLA's host device count is fixed when jax initialises, so the checks run in
subprocesses started with ``XLA_FLAGS=--xla_force_host_platform_device_count=4``
(this file run as a script: ``--worker curves`` / ``--worker runner``), each
printing one JSON report that the tests assert:

* curves: the shipped ``cartpole_ppo`` config, shrunk, trained by
  ``jax.jit(make_train(config))`` with devices=1, 2 and 4 (``sampler: jax``,
  same global num_envs) gives the same losses and returns up to float
  summation order (A2C too, devices=1 vs 2); ``jax.vmap`` over seeds composes with devices=2; the
  compiled update all-reduces the gradients, the compiled rollout (policy,
  sampler, env step) has no all-gather and launches the env kernel once per
  step on each device's own envs; state placement (params replicated, env
  state split along envs).
* runner: `train_run` with devices=2 and 2 seeds, stopped and resumed with
  devices=2 (reproduces the uninterrupted run bit for bit) and with devices=4
  (restored onto the new mesh; equal up to float order); config errors;
  the explicit kernel sampler over devices.

The multi-host test starts two processes on localhost (one CPU device each,
``jax.distributed`` through JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES /
JAX_PROCESS_ID) that train a tiny config to the end; process 0 alone writes
the run's files.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from _workers import distributed_job

from jaxwarp.train import ConfigError, config_from_dict

DEVICES = 4
# cartpole_ppo, shrunk: 8 envs x 16 steps, 4 updates of 2 epochs x 2 minibatches.
OVERRIDES = ["backend=cpu", "sampler=jax", "num_envs=8", "num_steps=16",
             "total_env_steps=512", "num_minibatches=2", "update_epochs=2",
             "policies.agent.hidden_sizes=[16]", "chunk_updates=2", "checkpoint_every=2",
             "minibatch_shuffle=global"]  # the exact one-device curve; "device" below
# Float summation order differs between device counts (the means over the
# batch are all-reduced from per-device partial sums).
RTOL, ATOL = 1e-4, 1e-5


def _config(*extra: str):
    from jaxwarp.train import load_config

    return load_config("cartpole_ppo", [*OVERRIDES, *extra])


def _np(tree):
    import jax
    import numpy as np

    return jax.tree.map(lambda x: np.asarray(x).tolist(), tree)


def _error_of(f) -> list[str] | None:
    try:
        f()
    except Exception as e:  # noqa: BLE001 (the report records the type)
        return [type(e).__name__, str(e)]
    return None


def _loop_collectives(hlo: str) -> list[str]:
    """Collectives inside while-loop bodies of a compiled module's text (the
    computations named by a while's body=, each a block starting at column 0)."""
    bodies = set(re.findall(r"body=%?([\w.\-]+)", hlo))
    found = set()
    for block in re.split(r"\n(?=\S)", hlo):
        name = block.split(" ", 1)[0].lstrip("%")
        if name in bodies:
            found |= {op for op in ("all-reduce", "all-gather", "all-to-all",
                                    "collective-permute") if f" {op}(" in block}
    return sorted(found)


# ---------------------------------------------------------------------------
# The subprocesses: python tests/test_train_devices.py --worker NAME
# ---------------------------------------------------------------------------
def _worker_curves() -> dict:
    import jax
    import jax.numpy as jnp

    from jaxwarp.sharding import collectives_in
    from jaxwarp.train import build_trainer, make_train

    assert jax.device_count() == DEVICES, jax.devices()
    report: dict = {"curves": {}}
    train1 = jax.jit(make_train(_config("devices=1")))
    for d in (1, 2, 4):
        train = train1 if d == 1 else jax.jit(make_train(_config(f"devices={d}")))
        _, m = train(jax.random.PRNGKey(0))
        report["curves"][d] = _np(m)
    # PPO's default per-device shuffle: on one device the same as the global one;
    # over devices other minibatches (statistically the same learning, below).
    report["curves_device_shuffle_1"] = _np(jax.jit(make_train(_config(
        "devices=1", "minibatch_shuffle=device")))(jax.random.PRNGKey(0))[1])
    # Learning with the per-device shuffle on 4 devices vs one device: 6 seeds
    # each, 32 updates; final returns compared as samples.
    longer = ["num_envs=16", "num_steps=32", "total_env_steps=16384", "num_minibatches=4",
              "policies.agent.hidden_sizes=[32]"]
    keys = jnp.stack([jax.random.PRNGKey(100 + i) for i in range(6)])
    report["learning"] = {}
    for name, extra in (("one_device", ["devices=1"]),
                        ("device_shuffle_4", ["devices=4", "minibatch_shuffle=device"])):
        _, m = jax.jit(jax.vmap(make_train(_config(*longer, *extra))))(keys)
        report["learning"][name] = _np(m["agent/episode_return"])
    # A2C: its gradient chunks of envs are laid out per device.
    report["a2c"] = {d: _np(jax.jit(make_train(_config(f"devices={d}", "algorithm=a2c")))(
        jax.random.PRNGKey(0))[1]) for d in (1, 2)}
    # vmap over seeds with the envs split over 2 devices vs one device per seed.
    keys = jnp.stack([jax.random.PRNGKey(3), jax.random.PRNGKey(4)])
    rs2, m2 = jax.jit(jax.vmap(make_train(_config("devices=2"))))(keys)
    report["vmap"] = {"devices2": _np(m2),
                      "devices1": [_np(train1(keys[i])[1]) for i in range(2)],
                      "obs_spec": str(rs2.envs.obs.sharding.spec),
                      "mesh_size": len(rs2.envs.obs.sharding.device_set)}

    # What the compiled programs do on 4 devices.
    tr = build_trainer(_config("devices=4", "num_minibatches=1"))
    rs = jax.jit(tr.init)(jax.random.PRNGKey(0))
    update = jax.jit(lambda r: tr.run(r, 1)).lower(rs).compile().as_text()
    rollout = jax.jit(tr.rollout).lower(rs, jax.random.PRNGKey(1)).compile().as_text()
    # The gradient all-reduce: an all-reduce whose operands include the first
    # Dense kernel's gradient, f32[obs_dim=4, 16] (XLA may hold it transposed).
    grad_all_reduce = any(re.search(r"f32\[(4,16|16,4)\]", line.split(" all-reduce(")[0])
                          for line in update.splitlines() if " all-reduce(" in line)
    tr2 = build_trainer(_config("devices=4", "num_envs=16", "num_minibatches=2"))
    update_mb = jax.jit(lambda r: tr2.run(r, 1)).lower(
        jax.jit(tr2.init)(jax.random.PRNGKey(0))).compile().as_text()
    tr3 = build_trainer(_config("devices=4", "num_envs=16", "num_minibatches=2",
                                "minibatch_shuffle=device"))
    update_local = jax.jit(lambda r: tr3.run(r, 1)).lower(
        jax.jit(tr3.init)(jax.random.PRNGKey(0))).compile().as_text()
    report["hlo"] = {
        "update_minibatches_device_shuffle": collectives_in(update_local),
        "update": collectives_in(update), "update_minibatches": collectives_in(update_mb),
        "rollout": collectives_in(rollout), "grad_all_reduce": grad_all_reduce,
        "rollout_loop": _loop_collectives(rollout),
        "rollout_step_launches": rollout.count(
            f'custom_call_target="{tr.env.env._prefix}_step_cpu"'),
    }
    out, _ = jax.jit(lambda r: tr.run(r, 1))(rs)
    report["placement"] = {
        "params_replicated": all(x.sharding.is_fully_replicated
                                 for x in jax.tree.leaves(out.learner)),
        "env_specs": sorted({str(x.sharding.spec) for x in
                             jax.tree.leaves((out.envs.env_state, out.envs.obs))}),
        "env_devices": sorted({len(x.sharding.device_set) for x in
                               jax.tree.leaves((out.envs.env_state, out.envs.obs))}),
    }
    # A recurrent model (gru) over devices: its carry is split along the envs and
    # the curve is the one-device curve (PPO's global shuffle, A2C).
    gru = ["policies.agent.model=gru", "policies.agent.rnn_size=8"]
    report["gru"] = {}
    for algo in ("ppo", "a2c"):
        for d in (1, 2):
            rs_g, m_g = jax.jit(make_train(_config(*gru, f"algorithm={algo}",
                                                   f"devices={d}")))(jax.random.PRNGKey(0))
            report["gru"][f"{algo}{d}"] = _np(m_g)
            if d == 2:
                report["gru"][f"{algo}_carry_spec"] = str(rs_g.envs.carry["agent"].sharding.spec)
    return report


def _worker_runner(tmp: str) -> dict:
    import jax
    import numpy as np

    from jaxwarp.run.loop import read_metrics, train_run
    from jaxwarp.train import build_trainer, make_train

    assert jax.device_count() == DEVICES, jax.devices()
    base = Path(tmp)
    c = _config("devices=2")
    report: dict = {}
    full = train_run(c, base / "full", seeds=2, progress=False)
    train_run(c, base / "part", seeds=2, progress=False, stop_after_updates=2)
    shutil.copytree(base / "part", base / "part4")
    same = train_run(None, base / "part", resume=True, progress=False)
    four = train_run(None, base / "part4", resume=True, progress=False, devices=4)

    def table(out):
        return {f"{r['update']}/{r['seed']}": {k: v for k, v in r.items()
                                                 if k not in ("wall_s", "env_steps_per_s")}
                for r in read_metrics(out)}

    report["full"], report["same"], report["four"] = (
        table(base / "full"), table(base / "part"), table(base / "part4"))
    report["resumed_from"] = [same.metrics[0]["update"], four.metrics[0]["update"]]
    report["summary"] = {k: [r.summary[k] for r in (full, same, four)]
                         for k in ("data_parallel_devices", "finished", "sampler", "devices")}
    report["params_equal_same"] = all(
        np.array_equal(x, y) for x, y in zip(jax.tree.leaves(full.state.learner.params),
                                             jax.tree.leaves(same.state.learner.params)))
    report["four_obs"] = [str(four.state.envs.obs.sharding.spec),
                          len(four.state.envs.obs.sharding.device_set)]

    report["errors"] = {
        "num_envs": _error_of(lambda: build_trainer(_config("devices=4", "num_envs=6",
                                                            "num_minibatches=1"))),
        "too_many": _error_of(lambda: build_trainer(_config("devices=8"))),
        "minibatch": _error_of(lambda: build_trainer(_config("devices=4",
                                                             "num_minibatches=4"))),
    }
    # sampler auto keeps the env backend's kernel sampler over devices: it draws
    # by global row, so 2 devices give the one-device losses.
    report["sampler_auto"] = build_trainer(_config("devices=2", "sampler=auto")).sampler
    report["kernel_sampler_losses"] = {
        d: np.asarray(jax.jit(make_train(_config(f"devices={d}", "sampler=cpu",
                                                 "total_env_steps=256")))(
            jax.random.PRNGKey(0))[1]["agent/loss"]).tolist() for d in (1, 2)}
    return report


# ---------------------------------------------------------------------------
# The tests.
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                        f" --xla_force_host_platform_device_count={DEVICES}").strip()
    env["JAX_PLATFORMS"] = "cpu"
    for k in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
        env.pop(k, None)
    tmp = tmp_path_factory.mktemp("runner")
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", name, str(tmp)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for name in ("curves", "runner")]
    outs = [p.communicate(timeout=900) for p in procs]
    out: dict = {}
    for p, (stdout, stderr) in zip(procs, outs):
        if p.returncode != 0:
            pytest.fail(f"worker failed (rc {p.returncode}):\n{stderr[-6000:]}")
        out.update(json.loads(stdout.strip().splitlines()[-1]))
    return out


def _close(a, b, what: str) -> None:
    import numpy as np

    assert a.keys() == b.keys(), what
    for k in a:
        x, y = np.asarray(a[k], float), np.asarray(b[k], float)
        np.testing.assert_allclose(x, y, rtol=RTOL, atol=ATOL, err_msg=f"{what}: {k}")


def test_devices_give_the_one_device_learning_curve(report):
    curves = report["curves"]
    one = curves["1"]
    assert len(one["agent/loss"]) == 4
    assert all(math.isfinite(x) for x in one["agent/episode_return"][1:])  # episodes ended
    for d in ("2", "4"):
        _close(curves[d], one, f"devices={d} vs devices=1")
    # Not trivially equal: the learning moves the loss.
    assert len(set(one["agent/loss"])) == 4


def test_recurrent_model_over_devices(report):
    g = report["gru"]
    for algo in ("ppo", "a2c"):
        _close(g[f"{algo}2"], g[f"{algo}1"], f"gru {algo} devices=2 vs devices=1")
        assert g[f"{algo}_carry_spec"] == "P('envs',)"
    assert len(set(g["ppo1"]["agent/loss"])) == 4


def test_a2c_gradient_chunks_over_devices(report):
    _close(report["a2c"]["2"], report["a2c"]["1"], "a2c devices=2 vs devices=1")


def test_vmap_over_seeds_composes_with_devices(report):
    v = report["vmap"]
    for i in range(2):
        _close({k: x[i] for k, x in v["devices2"].items()}, v["devices1"][i], f"seed {i}")
    assert v["obs_spec"] == "P(None, 'envs')" and v["mesh_size"] == 2


def test_update_all_reduces_gradients_and_rollout_gathers_nothing(report):
    hlo = report["hlo"]
    # One minibatch: the gradients' all-reduce (and the metrics' means) only.
    assert hlo["update"] == ["all-reduce"], hlo["update"]
    assert hlo["grad_all_reduce"]
    # The rollout (policy forward, jax sampler, env kernel) moves no env data:
    # only the all-reduce of the episode statistics' sums.
    assert "all-gather" not in hlo["rollout"] and set(hlo["rollout"]) <= {"all-reduce"}
    # ... summed per env through the steps and over the envs once after them: no
    # collective inside the step loop.
    assert hlo["rollout_loop"] == [], hlo["rollout_loop"]
    assert hlo["rollout_step_launches"] == 1  # one launch per device on its own envs
    # Several minibatches, global shuffle: the batch is dealt out once per epoch
    # (an all-gather); per-device shuffle (the default): no exchange of the batch.
    assert hlo["update_minibatches"] == ["all-gather", "all-reduce"]
    assert hlo["update_minibatches_device_shuffle"] == ["all-reduce"]


def test_per_device_shuffle_is_the_global_one_on_one_device(report):
    _close(report["curves_device_shuffle_1"], report["curves"]["1"], "device shuffle, 1 device")


def test_per_device_shuffle_learns_as_one_device(report):
    import numpy as np

    learn = report["learning"]
    one, four = (np.asarray(learn[k], float) for k in ("one_device", "device_shuffle_4"))
    assert one.shape == four.shape == (6, 32)
    start, end1, end4 = one[:, :4].mean(), one[:, -4:].mean(1), four[:, -4:].mean(1)
    # Both learn (CartPole's random return is about 20) ...
    assert end1.mean() > start + 20 and end4.mean() > start + 20, (start, end1, end4)
    # ... to final returns that agree as samples of 6 seeds (within 2.5 standard
    # errors of the difference; the draws are fixed, so this does not flake).
    se = np.sqrt(end1.var(ddof=1) / 6 + end4.var(ddof=1) / 6)
    assert abs(end1.mean() - end4.mean()) <= 2.5 * se + 5.0, (end1, end4, se)


def test_state_placement(report):
    p = report["placement"]
    assert p["params_replicated"]
    assert p["env_specs"] == ["P('envs',)"] and p["env_devices"] == [4]


def test_sharded_checkpoint_resume_same_and_other_device_count(report):
    full, same, four = report["full"], report["same"], report["four"]
    assert report["resumed_from"] == [3, 3]  # restarted after the checkpoint at update 2
    assert report["summary"]["data_parallel_devices"] == [2, 2, 4]
    # summary.json names the devices the run used, not every device of the host (4 here)
    assert [len(d) for d in report["summary"]["devices"]] == [2, 2, 4]
    assert report["summary"]["finished"] == [True, True, True]
    assert report["summary"]["sampler"] == ["jax", "jax", "jax"]
    assert full.keys() == same.keys() == four.keys() and len(full) == 8
    for k in full:  # same device count: bit for bit the uninterrupted run
        for name, x in full[k].items():
            y = same[k][name]
            assert (x is None and y is None) or x == y or (
                math.isnan(x) and math.isnan(y)), (k, name, x, y)
    assert report["params_equal_same"]
    for k in full:  # 4 devices from update 3 on: equal up to float order
        a = {n: (math.nan if v is None else v) for n, v in full[k].items()}
        b = {n: (math.nan if v is None else v) for n, v in four[k].items()}
        _close(a, b, f"resumed on 4 devices, {k}")
    assert report["four_obs"] == ["P(None, 'envs')", 4]


@pytest.mark.parametrize("case, words", [
    ("num_envs", ["num_envs=6", "divisible", "4 devices", "devices=4"]),
    ("too_many", ["devices=8", "only 4 local device"]),
    ("minibatch", ["num_minibatches=4", "2 envs", "4 devices", "devices=4"]),
])
def test_device_errors(report, case, words):
    err = report["errors"][case]
    assert err is not None and err[0] == "ConfigError", err
    for w in words:
        assert w in err[1], (w, err[1])


def test_devices_config_field():
    assert config_from_dict({}).devices is None
    assert config_from_dict({"devices": 2}).to_dict()["devices"] == 2
    for bad in (0, -1, "two", 1.5, True):
        with pytest.raises(ConfigError, match="devices"):
            config_from_dict({"devices": bad})


def test_sampler_choice_over_devices(report):
    assert report["sampler_auto"] == "cpu"  # the env's backend
    losses = report["kernel_sampler_losses"]
    assert len(losses["1"]) == 2 and all(math.isfinite(x) for x in losses["1"])
    _close({"loss": losses["2"]}, {"loss": losses["1"]}, "kernel sampler, 2 devices vs 1")


# ---------------------------------------------------------------------------
# Two processes on localhost (jax.distributed, CPU collectives).
# ---------------------------------------------------------------------------
MULTIHOST_SCRIPT = """
import json, sys
from jaxwarp.train import load_config
from jaxwarp.run.loop import train_run
config = load_config("cartpole_ppo", json.loads(sys.argv[2]))
r = train_run(config, sys.argv[1], progress=False)
import jax
print(json.dumps({"process": jax.process_index(), "processes": jax.process_count(),
                  "summary": r.summary, "loss": [m["agent/loss"] for m in r.metrics]}))
"""


def _two_processes(args: list[str]) -> tuple[list[subprocess.Popen], list[tuple[str, str]]]:
    """Runs `args` as processes 0 and 1 of one jax.distributed job (one CPU
    device each) and waits for both: (processes, their (stdout, stderr))."""
    return distributed_job(args, 2)


def test_two_processes_train_to_the_end(report, tmp_path):
    out = tmp_path / "run"
    procs, outs = _two_processes(
        [sys.executable, "-c", MULTIHOST_SCRIPT, str(out), json.dumps(OVERRIDES)])
    results = []
    for p, (stdout, stderr) in zip(procs, outs):
        assert p.returncode == 0, stderr[-4000:]
        # train_run leaves jax.distributed up: the processes meet at exit
        # (distributed's exit hook), no gRPC report of a peer or coordinator gone
        assert "CANCELLED" not in stderr, stderr[-4000:]
        results.append(json.loads(stdout.strip().splitlines()[-1]))
    assert [r["process"] for r in results] == [0, 1]
    assert all(r["processes"] == 2 for r in results)
    for r in results:
        s = r["summary"]
        assert s["finished"] and s["updates"] == 4 and s["data_parallel_devices"] == 2
    # Every process computed the same (replicated) metrics...
    assert results[0]["loss"] == results[1]["loss"]
    # ... which are the single-process curve (2 envs x 4 devices there, 4 x 2 here).
    _close({"loss": results[0]["loss"]}, {"loss": report["curves"]["1"]["agent/loss"]},
           "two processes vs one device")
    # Process 0 alone wrote the files: one metrics row per update; the finished
    # run removed its lock.
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [1, 2, 3, 4]
    assert (out / "summary.json").exists() and (out / "config.yaml").exists()
    assert not (out / ".lock").exists()
    assert sorted(q.name for q in (out / "checkpoints").iterdir()) == ["2", "4"]


def test_two_processes_cli_evaluates_and_ends_cleanly(tmp_path):
    """`jaxwarp train` over two processes: the evaluation and the GIF after the
    run work (each process restores the policies onto its own device; process 0
    writes eval.json), and both processes end with an empty stderr (a barrier
    and jax.distributed.shutdown: no gRPC reports of a peer gone)."""
    out = tmp_path / "run"
    procs, outs = _two_processes(
        [sys.executable, "-m", "jaxwarp", "train", "--env", "cartpole", "--no-progress",
         "--eval-episodes", "16", "--out", str(out), *OVERRIDES])
    for i, (p, (stdout, stderr)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, stderr[-4000:]
        assert stderr == "", f"process {i}: {stderr[-4000:]}"
    result = json.loads((out / "eval.json").read_text())
    assert result["episodes"] == 16 and "gain" in result
    assert (out / "trained_vs_random.gif").stat().st_size > 0
    assert "vs random" in outs[0][0] and "vs random" not in outs[1][0]  # process 0 prints


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    import time

    t0 = time.perf_counter()
    name = sys.argv[2]
    if name == "curves":
        result = _worker_curves()
    else:
        with tempfile.TemporaryDirectory(dir=sys.argv[3]) as tmp:
            result = _worker_runner(tmp)
    result[f"{name}_seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(result))
