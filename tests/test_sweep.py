"""Sweeps (docs/sweeps.md): settings x seeds in one vmapped program, each
member the run `jaxwarp train` gives with its setting and seed; the ranked
report, best.yaml, the resume, and bad input refused in one line before
anything compiles. Tiny CartPole runs on the pure-JAX backend."""

from __future__ import annotations

import json
import math
import warnings

import jax
import numpy as np
import pytest
import yaml
from _tiny_run import TINY, ckpt_steps, tiny_config
from _workers import distributed_job

from jaxwarp.cli import main as cli_main
from jaxwarp.errors import ConfigError, RunError
from jaxwarp.run.loop import train_run
from jaxwarp.train import load_config, make_train
from jaxwarp.train.hyper import Hyper
from jaxwarp.train.seeds import seed_keys
from jaxwarp.train.sweep import Sweep, make_sweep, parse_sweep

GRID = ["policies.agent.lr=1e-3,3e-2", "clip_eps=0.1,0.3"]


def test_grid_settings_in_order_with_plain_overrides_kept():
    plain, sw = parse_sweep(["num_envs=8", *GRID, "gamma=0.9"])
    assert plain == ["num_envs=8", "gamma=0.9"]
    assert sw.keys == ("policies.agent.lr", "clip_eps")
    assert sw.settings() == [{"policies.agent.lr": a, "clip_eps": b}
                             for a in (1e-3, 3e-2) for b in (0.1, 0.3)]


def test_random_draws_are_reproducible_and_in_range():
    _, sw = parse_sweep(["ent_coef=loguniform(1e-4,1e-1)", "vf_coef=uniform(0.25,1)",
                         "gamma=0.9,0.99"], samples=5, seed=7)
    settings = sw.settings()
    assert len(settings) == 10
    assert [s["gamma"] for s in settings] == [0.9] * 5 + [0.99] * 5
    assert all(1e-4 <= s["ent_coef"] <= 1e-1 and 0.25 <= s["vf_coef"] <= 1 for s in settings)
    assert settings[:5] == [{**s, "gamma": 0.9} for s in settings[5:]]  # the same draws
    assert Sweep.from_dict(sw.to_dict()) == sw
    assert parse_sweep(["ent_coef=uniform(0,1)"], samples=5, seed=8)[1].settings() != \
        parse_sweep(["ent_coef=uniform(0,1)"], samples=5, seed=7)[1].settings()


@pytest.mark.parametrize("words, samples, message", [
    (["num_envs=4,8"], None, "num_envs: changes the program's shapes"),
    (["policies.agent.hidden_sizes=[8],[16]"], None, "policies.agent.hidden_sizes: changes"),
    (["update_epochs=1,2"], None, "update_epochs: changes"),
    (["learning_rate=1,2"], None, "learning_rate: is not a config key"),
    (["ent_coef=0,,0.1"], None, "ent_coef=0,,0.1: an empty value"),
    (["ent_coef=0,abc"], None, "ent_coef: expected finite numbers, got 'abc'"),
    (["ent_coef=0,nan"], None, "ent_coef: expected finite numbers"),
    (["ent_coef=uniform(0,1)"], None, "needs --samples N"),
    (["ent_coef=loguniform(0,1)"], 4, "both > 0"),
    (["ent_coef=uniform(1,0.5)"], 4, "low < high"),
    (["ent_coef=0,1", "ent_coef=2,3"], None, "ent_coef: swept twice"),
    (["num_envs=8"], None, "a sweep needs at least one swept key"),
    (["ent_coef=0,1"], 0, "--samples must be in [1, 4096]"),
])
def test_bad_sweeps_are_one_line_errors(words, samples, message):
    with pytest.raises(ConfigError, match=None) as e:
        parse_sweep(words, samples)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_sweep_splits_its_runs_evenly_over_every_process_or_says_why(monkeypatch):
    """Under jax.distributed (here 2 processes, as jax.process_count says) a
    sweep's runs split evenly over the same devices of every process; runs
    that do not divide are refused in one line naming the numbers."""
    from jaxwarp.train.mesh import sweep_layout

    monkeypatch.setattr(jax, "process_count", lambda: 2)
    layout = sweep_layout(None, 6)
    assert (layout.devices, layout.processes, layout.size) == (1, 2, 2)
    for devices, members, message in (
            (None, 3, "a sweep over 2 processes splits its 3 runs (settings x seeds) evenly "
             "over every process's devices; 3 is not a multiple of 2"),
            (1, 5, "devices=1: a sweep splits its 5 runs (settings x seeds) evenly over 1 x 2 "
             "processes = 2 devices; expected devices x 2 to divide 5")):
        with pytest.raises(ConfigError) as e:
            sweep_layout(devices, members)
        assert message in str(e.value) and "\n" not in str(e.value)


def test_a_value_out_of_range_names_the_setting():
    _, sw = parse_sweep(["clip_eps=0.2,-1"])
    with pytest.raises(ConfigError, match=r"sweep setting clip_eps=-1: clip_eps=-1.0 is invalid"):
        sw.configs(tiny_config())


def test_a_plain_run_carries_its_config_as_arrays():
    h = Hyper.of(tiny_config("clip_eps=0.25", "max_grad_norm=0", "policies.agent.lr=0.002"),
                 ["agent"])
    assert h.clip_eps.dtype == np.float32 and float(h.clip_eps) == np.float32(0.25)
    assert float(h.lr["agent"]) == np.float32(0.002)
    assert float(h.grad_clip()) == math.inf  # 0 turns the clip off


def test_each_member_is_the_train_run_of_its_setting_and_seed():
    c = tiny_config("num_minibatches=2", "update_epochs=2")
    _, sw = parse_sweep([*GRID, "gamma=0.9,0.99"])
    rs, m = jax.jit(make_sweep(c, sw))(seed_keys(0, 2))
    assert m["agent/loss"].shape == (16, 8)
    configs = sw.configs(c)  # setting k: lr k // 4, clip_eps (k // 2) % 2, gamma k % 2
    finals = []
    # Four members, each its own `jaxwarp train` compile (the suite's time): both
    # values of every key and both seeds, first and last members among them.
    for k, s in ((0, 0), (3, 1), (4, 0), (7, 1)):
        # `jaxwarp train --seeds 1` with seed s: its program vmaps one member.
        rs1, m1 = jax.jit(jax.vmap(make_train(configs[k])))(seed_keys(s, 1))
        i = k * 2 + s
        for a, b in zip(jax.tree.leaves(rs.hyper), jax.tree.leaves(rs1.hyper)):
            assert a[i] == b[0]
        # Equal up to float order: XLA's batched kernels of 16 members sum in
        # another order than those of one (as for --seeds, test_train).
        for a, b in zip(jax.tree.leaves(rs.learner), jax.tree.leaves(rs1.learner)):
            np.testing.assert_allclose(a[i], b[0], rtol=2e-5, atol=1e-6)
        for name in m1:
            np.testing.assert_allclose(m[name][i], m1[name][0], rtol=2e-5, atol=1e-6,
                                       err_msg=name)
        finals.append(np.asarray(jax.tree.leaves(rs1.learner.params)[0][0]))
    assert not np.allclose(finals[0], finals[2])  # another learning rate learns otherwise


def _sweep(tmp_path, capsys, *extra: str) -> tuple[int, str, str]:
    code = cli_main(["sweep", "--no-progress", *TINY, *extra, "--out", str(tmp_path / "sw")])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_sweep_writes_the_ranked_report_and_a_trainable_best(tmp_path, capsys):
    code, out, err = _sweep(tmp_path, capsys, *GRID, "--seeds", "2", "--threshold", "10")
    assert code == 0, err
    folder = tmp_path / "sw"
    rep = json.loads((folder / "sweep.json").read_text())
    assert rep["metric"] == "agent/episode_return" and rep["threshold"] == 10
    assert sorted(r["setting"] for r in rep["ranked"]) == [0, 1, 2, 3]
    finals = [r["final"] for r in rep["ranked"]]
    assert finals == sorted(finals, reverse=True)
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 8 * 4 * 2 and {r["setting"] for r in rows} == {0, 1, 2, 3}
    assert (folder / "sweep.csv").read_text().splitlines()[0].startswith("rank,setting,")
    assert (folder / "sweep.png").stat().st_size > 0
    best = load_config(str(folder / "best.yaml"))
    top = rep["ranked"][0]
    assert best.policy("agent").lr == top["policies.agent.lr"]
    assert best.clip_eps == top["clip_eps"] and best.num_envs == 4
    assert "rank" in out and f"jaxwarp train --config {folder / 'best.yaml'}" in out
    saved = yaml.safe_load((folder / "config.yaml").read_text())
    assert saved["seeds"] == 2 and len(saved["sweep"]["settings"]) == 4
    assert saved["sweep"]["seed"] == saved["config"]["seed"] == 0
    # eval plays the best setting's two seeds (the checkpoint holds all eight runs)
    from jaxwarp.run.evaluate import load_runs

    runs = load_runs(folder)
    assert [r.seed for r in runs] == [0, 1]
    k = top["setting"]
    ckpt = train_state_params(folder)
    for i, r in enumerate(runs):
        for a, b in zip(jax.tree.leaves(r.params), jax.tree.leaves(ckpt)):
            np.testing.assert_array_equal(a, np.asarray(b)[k * 2 + i])
    assert cli_main(["eval", "--run", str(folder), "--episodes", "4"]) == 0
    assert (folder / "eval.json").exists() and (folder / "checkpoints").is_dir()
    assert not (folder / "checkpoints_corrupt").exists()


def train_state_params(folder):
    """The sweep's checkpointed parameters of every run, read as plain arrays."""
    import orbax.checkpoint as ocp

    step = max(int(p.name) for p in (folder / "checkpoints").iterdir() if p.name.isdigit())
    with ocp.PyTreeCheckpointer() as c, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Sharding info not provided": one host
        tree = c.restore(folder / "checkpoints" / str(step) / "default")
    return tree["learner"]["params"]


@pytest.mark.parametrize("args, message", [
    (["num_envs=4,8"], "num_envs: changes the program's shapes"),
    (["clip_eps=0.2,-1"], "sweep setting clip_eps=-1"),
    (["ent_coef=0,1", "--seeds", "0"], "--seeds 0 x 2 settings"),
    (["ent_coef=0,1", "--seeds", "6000"], "--seeds 6000 x 2 settings"),
])
def test_cli_sweep_refuses_bad_input_before_compiling(tmp_path, capsys, args, message):
    code, _, err = _sweep(tmp_path, capsys, *args)
    assert code == 2
    assert err.startswith("jaxwarp sweep: error: ") and message in err
    assert err.count("\n") == 1 and not (tmp_path / "sw").exists()


def test_a_stopped_sweep_in_chunks_resumes_to_the_uninterrupted_one(
        tmp_path, capsys, monkeypatch):
    """Stopped and resumed, in chunks of its runs (a memory with room for 3 of
    its 4 runs: 2 chunks of 2, one program): every metric and the final
    parameters bit for bit those of the sweep in one piece, the same report.
    (XLA's count of the compiled program, which would chunk it again, is
    tested alone below.)"""
    from jaxwarp.run import memory_guard

    _, sw = parse_sweep(["policies.agent.lr=1e-3,3e-2"])
    c = tiny_config()
    whole = train_run(c, tmp_path / "whole", seeds=2, sweep=sw, progress=False)
    monkeypatch.setattr(memory_guard, "program_bytes", lambda compiled: None)
    real = memory_guard.run_bytes

    def fits_three(run):
        parts = real(run)
        monkeypatch.setattr(memory_guard, "device_memory",
                            lambda *_: ("cpu", sum(parts.values()) * 3.5 / 4))
        return parts

    monkeypatch.setattr(memory_guard, "run_bytes", fits_three)
    train_run(c, tmp_path / "cut", seeds=2, sweep=sw, progress=True, stop_after_updates=4)
    assert "its 4 runs (2 settings x 2 seed(s)) need at least" in capsys.readouterr().err
    code = cli_main(["sweep", "--resume", str(tmp_path / "cut"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 0 and "which holds 3: 2 chunks of 2 runs" in err, err
    rows = [json.loads(line) for line in (tmp_path / "cut/metrics.jsonl").read_text().splitlines()]
    timing = ("env_steps_per_s", "wall_s")  # NaN (no episode finished yet) is null in JSON
    assert [{k: v for k, v in r.items() if k not in timing} for r in rows] == \
        [{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()
          if k not in timing} for r in whole.metrics]
    for a, b in zip(jax.tree.leaves(train_state_params(tmp_path / "cut")),
                    jax.tree.leaves(whole.state.learner.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert json.loads((tmp_path / "cut/sweep.json").read_text())["ranked"] == \
        json.loads((tmp_path / "whole/sweep.json").read_text())["ranked"]
    code = cli_main(["sweep", "--resume", str(tmp_path / "cut"), "ent_coef=0,1"])
    assert code == 2 and "drop the overrides" in capsys.readouterr().err
    code = cli_main(["train", "--resume", str(tmp_path / "cut")])
    assert code == 2 and "holds a sweep; continue it with: jaxwarp sweep --resume" in \
        capsys.readouterr().err


def test_chunks_of_runs_fill_the_last_with_repeats_and_drop_their_results():
    from jaxwarp.run.member_chunks import MemberChunks

    chunks = MemberChunks(members=5, size=2)
    assert [i.tolist() for i in chunks.indices()] == [[0, 1], [2, 3], [4, 0]]
    seen = []

    def program(state):  # one chunk's "update": doubles the state, reports its members
        seen.append(np.asarray(state["x"]).tolist())
        return {"x": state["x"] * 2}, {"member": state["x"]}

    state, metrics = chunks.over(program)({"x": np.arange(5.0)})
    assert seen == [[0, 1], [2, 3], [4, 0]]
    assert state["x"].tolist() == [0, 2, 4, 6, 8] and metrics["member"].tolist() == [0, 1, 2, 3, 4]


_TWO_DEVICES = r'''
import sys
sys.path.insert(0, sys.argv[2])
import jax, numpy as np
from _tiny_run import tiny_config
from jaxwarp.run.loop import train_run
from jaxwarp.train.sweep import parse_sweep

assert jax.device_count() == 2
_, sw = parse_sweep(["policies.agent.lr=1e-3,3e-2"])
one = train_run(tiny_config("devices=1"), sys.argv[1] + "/one", seeds=2, sweep=sw,
                progress=False)
two = sys.argv[1] + "/two"
train_run(tiny_config("devices=2"), two, seeds=2, sweep=sw, progress=False,
          stop_after_updates=4)
two = train_run(None, two, resume=True, progress=False)
leaf = jax.tree.leaves(two.state.learner.params)[0]
assert len(leaf.sharding.device_set) == 2, leaf.sharding  # the runs split over both
for a, b in zip(jax.tree.leaves(one.state.learner), jax.tree.leaves(two.state.learner)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=1e-6)
assert [r["setting"] for r in one.metrics[-16:]] == [r["setting"] for r in two.metrics]
print("ok")
'''


def test_a_sweep_over_two_devices_equals_it_on_one(tmp_path):
    """Its runs split over the devices (each device whole runs), also after a
    resume; the same learning as on one device up to float order."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
               JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", _TWO_DEVICES, str(tmp_path),
                           str(Path(__file__).parent)], env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


# A sweep over two processes (jax.distributed on localhost, 2 CPU devices each):
# 2 settings x 4 seeds, 2 runs a device. The same script stops it after 4 of
# its 8 updates (`stop`; its compiled chunk program reported), and trains it
# whole in one process of 4 devices, then reads the other's final checkpoint
# onto its own devices (`whole`).
_PROCESSES = r'''
import json, sys
sys.path.insert(0, sys.argv[3])
import jax, numpy as np
from _tiny_run import tiny_config
from jaxwarp.run import loop
from jaxwarp.run.checkpoint import restore_intact
from jaxwarp.run.loop import train_run
from jaxwarp.sharding import collectives_in
from jaxwarp.train.sweep import parse_sweep

_, sw = parse_sweep(["policies.agent.lr=1e-3,3e-2"])
mode, out = sys.argv[1], sys.argv[2]
report = {}  # no jax call before train_run: it starts jax.distributed
if mode == "stop":
    compile_chunk, found = loop._compile, []
    def spy(run, n):
        compiled = compile_chunk(run, n)
        found.append(collectives_in(compiled.as_text()))
        return compiled
    loop._compile = spy
    r = train_run(tiny_config(), out, seeds=4, sweep=sw, progress=False, stop_after_updates=4)
    leaf = jax.tree.leaves(r.state.learner.params)[0]
    report |= {"collectives": found, "updates": r.summary["updates"],
               "mine": sorted(str(s.device) for s in leaf.addressable_shards)}
else:
    r = train_run(tiny_config(), out + "/one", seeds=4, sweep=sw, progress=False)
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                            r.state)
    step, two = restore_intact(__import__("pathlib").Path(out + "/two"), abstract,
                               read_only=True)
    paths = jax.tree_util.tree_leaves_with_path(r.state)
    report |= {"step": step, "differ": [jax.tree_util.keystr(p) for (p, a), b in zip(
        paths, jax.tree.leaves(two)) if not np.array_equal(np.asarray(a), np.asarray(b))]}
print(json.dumps(report | {"process": jax.process_index(), "devices": jax.device_count()}))
'''


def _run_processes(args: list[str], processes: int, devices: int) -> list[tuple[str, str]]:
    """`args` as `processes` processes of one jax.distributed job on localhost
    (`devices` CPU devices each); (stdout, stderr) of each, all exited 0."""
    procs, outs = distributed_job(args, processes, devices)
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-4000:]
    return outs


def _json_line(stdout: str) -> dict:
    return json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])


def test_a_sweep_over_two_processes_is_the_sweep_in_one(tmp_path):
    """Two processes x 2 CPU devices: every run on one device of one process,
    no collective in the program; stopped after 4 updates, resumed by
    `jaxwarp sweep --resume` under both processes. Process 0 alone wrote the
    folder: every metric row, the report, best.yaml and the final checkpoint
    are those of the same sweep in one process of 4 devices, bit for bit (its
    whole runner state, every leaf)."""
    import sys
    from pathlib import Path

    tests = str(Path(__file__).parent)
    two, one = tmp_path / "two", tmp_path / "one"
    stop = [_json_line(o) for o, _ in _run_processes(
        [sys.executable, "-c", _PROCESSES, "stop", str(two), tests], 2, 2)]
    assert [r["process"] for r in stop] == [0, 1] and all(r["devices"] == 4 for r in stop)
    # Each process holds its own devices' runs: 2 devices, 4 of the 8 runs.
    assert all(len(r["mine"]) == 2 for r in stop)
    assert set(stop[0]["mine"]).isdisjoint(stop[1]["mine"])
    assert all(r["updates"] == 4 and r["collectives"] == [[]] for r in stop), stop
    outs = _run_processes([sys.executable, "-m", "jaxwarp", "sweep", "--resume", str(two),
                           "--no-progress"], 2, 2)
    best = "the best setting: jaxwarp train --config"  # process 0 prints the table
    assert best in outs[0][0] and best not in outs[1][0]
    assert all("Traceback" not in err and "CANCELLED" not in err for _, err in outs), outs
    whole = _json_line(_run_processes([sys.executable, "-c", _PROCESSES, "whole",
                                       str(tmp_path), tests], 1, 4)[0][0])
    assert whole["step"] == 8 and whole["differ"] == [], whole
    timing = ("env_steps_per_s", "wall_s")
    rows = [[{k: v for k, v in json.loads(line).items() if k not in timing}
             for line in (f / "metrics.jsonl").read_text().splitlines()] for f in (two, one)]
    assert len(rows[0]) == 8 * 8 and rows[0] == rows[1]
    assert json.loads((two / "sweep.json").read_text())["ranked"] == \
        json.loads((one / "sweep.json").read_text())["ranked"]
    assert (two / "best.yaml").read_text() == (one / "best.yaml").read_text()
    assert not (two / ".lock").exists() and ckpt_steps(two) == [6, 8]


def test_xla_count_of_the_compiled_program_chunks_a_sweep_again(monkeypatch):
    from types import SimpleNamespace

    from jaxwarp.run import memory_guard

    run = SimpleNamespace(config=SimpleNamespace(devices=None), settings=[{}] * 5, seeds=1,
                          members=5, local_members=5, trainer=None,
                          layout=SimpleNamespace(devices=1, processes=1))
    # A program of 5 runs: 5 kB in, 5 kB out over the donated input, 10 kB temporaries.
    compiled = SimpleNamespace(memory_analysis=lambda: SimpleNamespace(
        argument_size_in_bytes=5000, output_size_in_bytes=5000, alias_size_in_bytes=5000,
        temp_size_in_bytes=10_000))
    assert memory_guard.program_bytes(compiled) == 15_000
    assert memory_guard.program_bytes(object()) is None  # XLA does not say: nothing checked
    # 3 kB a run, a program may take 90% of the memory: 16 kB would hold all 5 by
    # XLA's count but not within 90% of it (2 chunks of 3); 10 kB holds 3 of 5
    for limit, size in ((20_000, None), (16_000, 3), (10_000, 3)):
        monkeypatch.setattr(memory_guard, "device_memory", lambda *_, m=limit: ("cpu", m))
        chunks = memory_guard.check_program(run, compiled, members=5, devices=1)
        assert (chunks and chunks.size) == size
    assert "need 15 kB (XLA's count of the program compiled for 5; a program may take 90% " \
        "of the memory), more than the host's memory (9 kB), which holds 3: 2 chunks of 3 " \
        "runs" in chunks.why
    monkeypatch.setattr(memory_guard, "device_memory", lambda *_: ("cpu", 2_000))
    with pytest.raises(RunError, match="one run of the sweep per device needs 3 kB"):
        memory_guard.check_program(run, compiled, members=5, devices=1)
    # Over several processes a sweep that does not fit at once is refused (its runs'
    # states would wait on one host between chunks).
    many = SimpleNamespace(**vars(run) | {"layout": SimpleNamespace(devices=1, processes=2)})
    monkeypatch.setattr(memory_guard, "device_memory", lambda *_: ("cpu", 10_000))
    with pytest.raises(RunError, match="a sweep over 2 processes: the 5 runs of each .* a sweep "
                       "in chunks of its runs runs in one process"):
        memory_guard.check_program(many, compiled, members=5, devices=1)
    # In chunks, every run's state waits in host memory, twice: 2 x 4 kB here.
    monkeypatch.setattr(memory_guard, "device_memory", lambda *_: ("cpu", 10_000))
    monkeypatch.setattr(memory_guard, "run_bytes", lambda r: {"model": 3000, "env": 1000})
    monkeypatch.setattr(memory_guard, "memory_limit", lambda platform: 7_000)
    with pytest.raises(RunError, match=r"keeps its 5 runs' states in host memory, twice: 8 kB"):
        memory_guard.check_program(run, compiled, members=5, devices=1)


def test_a_sweep_without_room_for_one_run_per_device_is_refused(tmp_path, capsys,
                                                                 monkeypatch):
    from jaxwarp.run import memory_guard

    real = memory_guard.run_bytes

    def no_room(run):  # room for half a run
        parts = real(run)
        monkeypatch.setattr(memory_guard, "device_memory",
                            lambda *_: ("cpu", sum(parts.values()) / run.members / 2))
        return parts

    monkeypatch.setattr(memory_guard, "run_bytes", no_room)
    code, _, err = _sweep(tmp_path, capsys, *GRID, "--seeds", "2")
    assert code == 2 and "the run needs at least" in err
    assert "(not even one run per device fits)" in err and err.count("\n") == 1
    assert not (tmp_path / "sw").exists()


# ---------------------------------------------------------------------------
# Env params as data (env_params.<name>): a kernel env's params swept in one
# program, each member the `jaxwarp train` run of its setting.
# ---------------------------------------------------------------------------
MPE = ["backend=cpu", "num_envs=4", "num_steps=8", "total_env_steps=128", "num_minibatches=1",
       "update_epochs=1", "policies.agent.hidden_sizes=[8]"]


def _mpe(*overrides: str):
    return load_config("mpe_simple_spread_ppo", [*MPE, *overrides])


def test_env_params_are_sweepable_keys():
    plain, sw = parse_sweep(["env_params.local_ratio=0.2,0.8", "gamma=0.9,0.99",
                             "env_params.damping=0.3"])
    assert plain == ["env_params.damping=0.3"]
    assert sw.keys == ("env_params.local_ratio", "gamma")
    with pytest.raises(ConfigError, match=r"env_params\.: changes the program"):
        parse_sweep(["env_params.=1,2"])


def test_each_member_is_the_train_run_of_its_env_params():
    c = _mpe()
    _, sw = parse_sweep(["env_params.local_ratio=0.2,0.8", "env_params.max_steps=10,25"])
    rs, m = jax.jit(make_sweep(c, sw))(seed_keys(0, 1))
    assert rs.hyper.env.shape[0] == 4 and rs.hyper.env.dtype == np.int32
    returns = []
    for k, ck in enumerate(sw.configs(c)):
        rs1, m1 = jax.jit(jax.vmap(make_train(ck)))(seed_keys(0, 1))
        np.testing.assert_array_equal(rs.hyper.env[k], rs1.hyper.env[0])
        for a, b in zip(jax.tree.leaves(rs.envs), jax.tree.leaves(rs1.envs)):
            np.testing.assert_allclose(a[k], b[0], rtol=2e-5, atol=1e-6)
        for a, b in zip(jax.tree.leaves(rs.learner), jax.tree.leaves(rs1.learner)):
            np.testing.assert_allclose(a[k], b[0], rtol=2e-5, atol=1e-6)
        for name in m1:
            np.testing.assert_allclose(m[name][k], m1[name][0], rtol=2e-5, atol=1e-6,
                                       err_msg=name)
        returns.append(np.asarray(m1["agent/episode_return"][0]))
    # local_ratio weighs the rewards otherwise: other returns.
    assert not np.allclose(returns[0], returns[2], equal_nan=True)


@pytest.mark.parametrize("words, message", [
    (["env_params.local_ratio=0.5,1.5"],
     "env_params.local_ratio: local_ratio=1.5: mpe_simple_spread: local_ratio=1.5; expected"),
    (["env_params.num_agents=3,4"],
     ("env_params.num_agents: num_agents=4: mpe_simple_spread: params num_agents change the "
      "env's agent count")),
    (["env_params.num_landmarks=2,3"], "change the env's observation width"),
    (["env_params.radius=1,2"], "env_params.radius: not a parameter of mpe_simple_spread"),
    (["env_params.max_steps=10,10.5"], "env_params.max_steps: max_steps=10.5"),
])
def test_bad_env_params_are_refused_in_one_line_before_compiling(words, message):
    _, sw = parse_sweep(words)
    with pytest.raises(ConfigError) as e:
        make_sweep(_mpe(), sw)
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("words, message", [
    (["env_params.local_ratio=0.5,1.5"], "env_params.local_ratio: local_ratio=1.5"),
    (["env_params.radius=1,2"], "env_params.radius: not a parameter of mpe_simple_spread"),
])
def test_cli_refuses_bad_env_params_before_making_the_run_folder(tmp_path, capsys, monkeypatch,
                                                                 words, message):
    """The env's check of a setting's params runs before the folder is made:
    one line, exit 2, no folder, and the run folder was never taken."""
    from jaxwarp.run import loop

    taken = []
    monkeypatch.setattr(loop, "take_folder", lambda *a: taken.append(a))
    out = tmp_path / "sw"
    code = cli_main(["sweep", "--no-progress", "--config", "mpe_simple_spread_ppo", *MPE, *words,
                     "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("jaxwarp sweep: error: ") and message in err, err
    assert err.count("\n") == 1 and not out.exists() and not taken


def test_env_params_on_the_jax_backend_are_refused_in_one_line():
    _, sw = parse_sweep(["env_params.gravity=9.8,11"])
    with pytest.raises(ConfigError, match=r"env_params.gravity: sweeping env params needs a "
                       r"contract env on the 'cpu' or 'cuda' backend") as e:
        make_sweep(tiny_config(), sw)
    assert "\n" not in str(e.value)
