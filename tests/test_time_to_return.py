"""experiments/bench_time_to_return.py: its arithmetic (threshold, time to it,
intervals) on hand-made curves, its CLI errors, and a tiny CPU run of the MPE
case whose JSON must have the documented structure, with finite returns from
both IPPO implementations (jaxwarp's trainer and the pure-JAX peer on JaxMARL).
No timings are asserted."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from jaxwarp.train import compiler_options

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(EXPERIMENTS))
    spec = importlib.util.spec_from_file_location("bench_time_to_return",
                                                  EXPERIMENTS / "bench_time_to_return.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_smooth_and_first_reach(bench):
    curve = np.array([np.nan, 1.0, 3.0, 5.0, 7.0])
    # window 2: [nan, 1, (1+3)/2, (3+5)/2, (5+7)/2]
    np.testing.assert_allclose(bench.smooth(curve, 2), [np.nan, 1.0, 2.0, 4.0, 6.0])
    assert bench.first_reach(bench.smooth(curve, 2), 4.0) == 3
    assert bench.first_reach(curve, 8.0) is None


def test_threshold_and_time_to_it(bench):
    # Two runs of 2 seeds x 50 updates (window 1): returns rise from -30 by 0.5 per update.
    rise = -30.0 + 0.5 * np.arange(50)
    eps = np.full((2, 50), 8.0)  # 8 envs, each ending an episode every update
    fast = {"returns": {"agent": np.stack([rise, rise])}, "num_updates": 50, "run_s": 10.0,
            "batch_env_steps": 100, "episodes": eps, "num_envs": 8}
    slow = {"returns": {"agent": np.stack([rise - 2.0, rise - 2.0])}, "num_updates": 50,
            "run_s": 20.0, "batch_env_steps": 100, "episodes": eps, "num_envs": 8}
    # start: mean of the first updates (-30, -32) = -31; end: the lower final return, the
    # mean of slow's last 5% (2 updates: -6 and -5.5, minus 2) = -7.75; 0.9 of the way:
    # -31 + 0.9 * 23.25 = -10.075.
    thr = bench.threshold_for([fast, slow], "agent", 0.9)
    assert thr == pytest.approx(-10.075)
    t = bench.time_to(fast, fast["returns"]["agent"], thr)
    # fast first reaches it at update 40 (-30 + 20 = -10): 41 updates x 0.2 s.
    assert t["updates"] == 41 and t["env_steps_per_seed"] == 4100
    assert t["seconds"] == pytest.approx(41 * 0.2)
    assert t["seeds_reached"] == 2 and t["per_seed_seconds"]["mean"] == pytest.approx(8.2)
    # slow at update 44 (-32 + 22 = -10), 45 updates x 0.4 s.
    assert bench.time_to(slow, slow["returns"]["agent"], thr)["seconds"] == pytest.approx(18.0)
    flat = {"returns": {"agent": np.full((2, 10), -5.0)}, "num_updates": 10, "run_s": 1.0,
            "batch_env_steps": 1, "episodes": np.ones((2, 10)), "num_envs": 1}
    assert bench.threshold_for([flat], "agent", 0.9) is None  # nothing learned


def test_start_level_skips_updates_with_only_early_endings(bench):
    # Tag at 2048 envs x 50 steps, 100-step episodes: update 0 sees only the few episodes
    # that ended early (every runner caught: a high tagger return), update 1 all the rest.
    returns = np.array([[25.0, 6.5, 7.0], [np.nan, 6.9, 7.2]])
    episodes = np.array([[3.0, 2045.0, 2048.0], [0.0, 2048.0, 2048.0]])
    # mean episodes per update over the seeds: 1.5, 2046.5 -> cumulative 2048 at update 1
    assert bench.start_update(episodes, 2048) == 1
    assert bench.start_level(returns, episodes, 2048) == pytest.approx(6.7)
    assert bench.start_update(episodes[:, :1], 2048) is None
    # The early endings of update 0 do not count as reaching a threshold.
    run = {"num_updates": 3, "run_s": 3.0, "batch_env_steps": 1, "episodes": episodes,
           "num_envs": 2048}
    assert bench.time_to(run, returns, 7.0)["updates"] == 3  # (7.0 + 7.2) / 2 at update 2


def test_mean_ci_uses_student_t(bench):
    s = bench.mean_ci(np.array([1.0, 2.0, 3.0, np.nan]))
    # 3 values: sd 1, t(2) = 4.303: 4.303 / sqrt(3)
    assert s["mean"] == 2.0 and s["n"] == 3
    assert s["ci95"] == pytest.approx(4.303 / math.sqrt(3))


def test_device_slug(bench):
    assert bench.device_slug("NVIDIA H100 80GB HBM3", "gpu") == "h100"
    assert bench.device_slug("NVIDIA H200", "gpu") == "h200"
    assert bench.device_slug("cpu", "cpu") == "cpu"


@pytest.mark.parametrize("argv, words", [
    (["--cases", "mpe,atari"], "unknown case"),
    (["--seeds", "0"], "--seeds"),
    (["--threshold", "mpe=high"], "CASE=NUMBER"),
])
def test_cli_errors_are_one_line(bench, capsys, tmp_path, argv, words):
    assert bench.main(argv + ["--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("bench_time_to_return: error:") and words in err
    assert "\n" not in err


def test_tiny_mpe_run_writes_the_documented_json(bench, tmp_path):
    pytest.importorskip("jaxmarl")
    out = tmp_path / "ttr.json"
    # 16 envs x 128 steps (JaxMARL's sizes), 2 updates, 2 seeds: episodes (26 steps) end
    # in the first rollout, so both trainers log a return from the first update on.
    code = bench.main(["--cases", "mpe", "--scale", "paper", "--seeds", "2",
                       "--total-steps", "4096", "--backend", "cpu", "--out", str(out)])
    assert code == 0
    res = json.loads(out.read_text())
    meta = res["meta"]
    for key in ("commit", "device", "platform", "jax", "command", "return",
                "time_to_threshold", "seeds"):
        assert key in meta, key
    assert meta["seeds"] == 2 and "bench_time_to_return" in meta["command"]
    sd = res["cases"]["mpe"]["scales"]["paper"]
    hp = sd["hyperparameters"]
    assert (hp["num_envs"], hp["num_steps"], hp["lr"], hp["update_epochs"],
            hp["num_minibatches"]) == (16, 128, 2.5e-4, 4, 4)
    assert set(sd["runs"]) == {"jaxwarp", "peer"}
    assert sd["runs"]["jaxwarp"]["rollout"] == (
        "step by step: the cpu backend (XLA:CPU's matmuls are faster there)")
    for key, run in sd["runs"].items():
        assert run["num_updates"] == 2 and run["seeds"] == 2, key
        assert run["batch_env_steps"] == 16 * 128
        assert len(run["curve"]) == 2
        assert run["finite_returns"], key
        fr = run["final_return"]
        assert fr["n"] == 2 and all(math.isfinite(v) for v in fr["values"])
        # Per-agent return of 26 steps of MPE spread near random play: about -20 to -40.
        assert -80.0 < fr["mean"] < 0.0, (key, fr)
        assert run["compile_s"] > 0 and run["run_s"] > 0
    assert sd["runs"]["jaxwarp"]["env"] == "mpe_simple_spread"
    assert sd["runs"]["jaxwarp"]["backend"] == "cpu"
    # jaxwarp compiled as `jaxwarp train deterministic=false --seeds 2` compiles it
    assert sd["runs"]["jaxwarp"]["compiler_options"] == compiler_options(False, members=2) == {}
    assert sd["runs"]["peer"]["env"] == "MPE_simple_spread_v3"
    assert sd["runs"]["peer"]["num_agents"] == 3


def test_commit_comes_from_jaxwarp_commit_where_set(bench, monkeypatch):
    # The GPU machine's copy of the tree has a .git that is not this checkout's: the
    # commit passed in must win over what git says there.
    monkeypatch.setenv("JAXWARP_COMMIT", "0123abc")
    assert bench.git_commit() == ("0123abc", None)
    monkeypatch.delenv("JAXWARP_COMMIT")
    sha, _ = bench.git_commit()
    assert sha != "0123abc"


def test_recurrent_cases_carry_jaxmarls_published_hyperparameters(bench):
    # JaxMARL baselines/IPPO/config/ippo_rnn_mpe.yaml and
    # baselines/MAPPO/config/mappo_homogenous_rnn_mpe.yaml.
    rnn = bench.hyperparameters("mpe_rnn", "paper", None)
    assert (rnn["num_envs"], rnn["num_steps"], rnn["lr"], rnn["update_epochs"],
            rnn["num_minibatches"], rnn["clip_eps"], rnn["vf_coef"], rnn["ent_coef"],
            rnn["hidden_sizes"], rnn["rnn_size"], rnn["total_env_steps"]) == \
        (16, 128, 5e-4, 4, 2, 0.3, 1.0, 0.01, (128,), 128, 10_000_000)
    mappo = bench.hyperparameters("mpe_mappo", "paper", None)
    assert (mappo["lr"], mappo["num_minibatches"], mappo["clip_eps"], mappo["vf_coef"],
            mappo["critic"]) == (2e-3, 4, 0.2, 0.5, "centralised")
    # The feed-forward case is unchanged by the recurrent ones.
    assert "model" not in bench.hyperparameters("mpe", "paper", None)
    over = bench.jaxwarp_overrides("mpe_mappo", mappo, "cpu", 0)
    assert {"policies.agent.model=gru", "policies.agent.rnn_size=128",
            "critic=centralised", "policies.agent.activation=relu"} <= set(over)
    assert "policies.agent.model=mlp" in bench.jaxwarp_overrides(
        "mpe", bench.hyperparameters("mpe", "paper", None), "cpu", 0)


@pytest.mark.parametrize("case", ["mpe_rnn", "mpe_mappo"])
def test_tiny_recurrent_runs_both_trainers(bench, case):
    # Both sides of a recurrent case at tiny sizes (4 envs x 32 steps, 2 updates, 2 seeds):
    # finite per-agent returns near random play from the first update on.
    pytest.importorskip("jaxmarl")
    hp = bench.hyperparameters(case, "paper", None)
    hp.update(num_envs=4, num_steps=32, total_env_steps=4 * 32 * 2)
    for run in (bench.run_jaxwarp(case, hp, "cpu", 2, 0), bench.run_peer(case, hp, 2, 0)):
        r = run["returns"]["agent"]
        assert run["num_updates"] == 2 and r.shape == (2, 2), run["impl"]
        assert np.isfinite(r).all() and (-80.0 < r).all() and (r < 0.0).all(), (run["impl"], r)
        assert (run["episodes"] > 0).all()
