"""`jaxwarp eval` and `jaxwarp render --run`: a run's policies against random ones."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from PIL import Image

from jaxwarp import cli
from jaxwarp.train.config import load_config
from jaxwarp.train.evaluate import evaluate, load_run, make_policy, matchups, play, summary_line
from jaxwarp.train.runner import train_run

TINY = ["num_envs=8", "num_steps=8", "total_env_steps=128", "chunk_updates=1",
        "checkpoint_every=1", "env_params.episode_length=12",
        "policies.runner.model=mlp", "policies.runner.train=true"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A two-update Tag run with both groups trained (checkpoint at update 2)."""
    out = tmp_path_factory.mktemp("runs") / "tiny"
    train_run(load_config("tag_small_cpu", TINY), out, progress=False)
    return out


def test_matchups_cover_each_group_against_random_others():
    assert matchups({"agent": None}) == {"trained": {"agent": True},
                                         "random": {"agent": False}}
    m = matchups({"tagger": None, "runner": None})
    assert m["tagger trained"] == {"tagger": True, "runner": False}
    assert m["runner trained"] == {"tagger": False, "runner": True}
    assert set(m) == {"trained", "random", "tagger trained", "runner trained"}


def test_load_run_restores_the_newest_checkpoint(run_dir):
    run = load_run(run_dir)
    assert run.update == 2 and run.seed == 0
    assert set(run.params) == {"tagger", "runner"}
    with pytest.raises(ValueError, match="seed_index"):
        load_run(run_dir, seed_index=1)
    with pytest.raises(FileNotFoundError, match="not a jaxwarp run"):
        load_run(run_dir / "nowhere")


def test_policy_shapes_and_random_groups_ignore_the_params(run_dir):
    import jax
    import jax.numpy as jnp

    run = load_run(run_dir)
    env = run.trainer.env
    obs, _ = env.reset(jax.random.key(0), 5)
    trained = make_policy(run, {"tagger": True, "runner": True})(jax.random.key(1), obs)
    assert trained.shape == (5, env.num_agents, 2) and trained.dtype == jnp.int32
    nvec = np.asarray(env.action_space.nvec)
    assert (np.asarray(trained) >= 0).all() and (np.asarray(trained) < nvec).all()
    # Random groups do not read the policy: zeroed params give the same actions.
    zeroed = dataclasses.replace(run, params=jax.tree.map(jnp.zeros_like, run.params))
    a = make_policy(run, {"tagger": False, "runner": False})(jax.random.key(1), obs)
    b = make_policy(zeroed, {"tagger": False, "runner": False})(jax.random.key(1), obs)
    np.testing.assert_array_equal(a, b)


def test_play_records_each_envs_first_episode(run_dir):
    run = load_run(run_dir)
    figs = play(run, {"tagger": False, "runner": False}, episodes=6, seed=3)
    assert set(figs) == {"tagger/return", "runner/return", "tags_per_episode", "finished"}
    assert all(v.shape == (6,) and v.dtype == np.float64 for v in figs.values())
    np.testing.assert_array_equal(figs["finished"], 1.0)  # truncated at episode_length
    # Tag's taggers earn tag_reward_for_tagger (10) per tag and nothing else here.
    np.testing.assert_allclose(figs["tagger/return"] * 2, figs["tags_per_episode"] * 10,
                               rtol=1e-5)
    again = play(run, {"tagger": False, "runner": False}, episodes=6, seed=3)
    for k in figs:
        np.testing.assert_array_equal(figs[k], again[k])


def test_evaluate_reports_gains_with_intervals(run_dir):
    run = load_run(run_dir)
    r = evaluate(run, episodes=8, seed=0)
    assert r["update"] == 2 and r["episodes"] == 8 and r["env"] == "tag_continuous"
    assert set(r["matchups"]) == {"trained", "random", "tagger trained", "runner trained"}
    for g, s in r["gain"].items():
        assert s["delta"] == pytest.approx(s["trained"] - s["random"], abs=1e-9)
        assert s["ci95"] >= 0 and isinstance(s["beats_random"], bool)
        assert s["beats_random"] == (s["delta"] - s["ci95"] > 0)
        assert s["random"] == pytest.approx(r["matchups"]["random"][f"{g}/return"]["mean"])
    line = summary_line(r)
    assert "\n" not in line and "tagger: trained" in line and "runner: trained" in line
    json.dumps(r)  # JSON-ready
    with pytest.raises(ValueError, match="episodes"):
        evaluate(run, episodes=1)


def test_cli_eval_writes_json_and_one_line(run_dir, capsys):
    assert cli.main(["eval", "--run", str(run_dir), "--episodes", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("tag_continuous update 2, 4 episodes: tagger: trained")
    saved = json.loads((run_dir / "eval.json").read_text())
    assert saved["episodes"] == 4 and set(saved["gain"]) == {"tagger", "runner"}


@pytest.mark.parametrize("argv, message", [
    (["eval", "--run", "{run}", "--episodes", "1"], "--episodes must be >= 2"),
    (["eval", "--run", "{run}/missing"], "not a jaxwarp run"),
    (["render", "--run", "{run}", "--env", "cartpole"], "either --env NAME"),
    (["render"], "either --env NAME"),
    (["render", "--run", "{run}", "--config", "large"], "--config goes with --env"),
])
def test_cli_errors_are_one_line(run_dir, capsys, argv, message):
    argv = [a.replace("{run}", str(run_dir)) for a in argv]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"jaxwarp {argv[0]}: error: ") and message in err
    assert "\n" not in err


def test_cli_render_run_puts_trained_beside_random(run_dir, tmp_path, capsys):
    path = tmp_path / "side.gif"
    assert cli.main(["render", "--run", str(run_dir), "--steps", "3", "--size", "32",
                     "--out", str(path)]) == 0
    assert capsys.readouterr().out.strip() == str(path)
    with Image.open(path) as im:
        assert im.size == (32 + 1 + 32, 32) and im.n_frames == 4
        im.seek(0)
        frame = np.asarray(im.convert("RGB"))
    # Same start on both sides (same key): the first frames are identical.
    np.testing.assert_array_equal(frame[:, :32], frame[:, 33:])
    np.testing.assert_array_equal(frame[:, 32], 128)  # the grey line between them


def test_duel_cpu_main_job_both_groups_beat_random(tmp_path):
    """The README's main job on a CPU (`tag_duel_cpu`, 500 PPO updates, about
    90 s on 2 cores): trained taggers against random runners, and trained
    runners against random taggers, each beat the random policy beyond the
    95% interval of the paired difference (256 episodes)."""
    out = tmp_path / "duel"
    train_run(load_config("tag_duel_cpu", ["backend=cpu"]), out, progress=False)
    r = evaluate(load_run(out), episodes=256, seed=0)
    print(summary_line(r))
    for g in ("tagger", "runner"):
        assert r["gain"][g]["beats_random"], (g, r["gain"][g])
    assert r["gain"]["tagger"]["delta"] > 5  # tags: about 3x the random level


def test_metric_columns_have_one_order_for_every_env(run_dir):
    from jaxwarp.train.runner import _rows

    head = (run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
    assert head[:5] == ["update", "seed", "env_steps", "env_steps_per_s", "wall_s"]
    for names in (["tagger/loss", "env_steps", "a"], ["env_steps", "agent/loss"]):
        metrics = {k: np.ones((1, 2)) for k in names}
        row = _rows(metrics, 0, [0], 1.0, 0.0, 1.0)[0]
        assert list(row)[:5] == head[:5]
        assert list(row)[5:] == sorted(k for k in names if k != "env_steps")


def test_learning_curve_draws_the_random_levels_of_eval_json(run_dir):
    from jaxwarp.train.runner import _random_levels, plot_run

    assert cli.main(["eval", "--run", str(run_dir), "--episodes", "4"]) == 0
    ev = json.loads((run_dir / "eval.json").read_text())["matchups"]["random"]
    levels = _random_levels(run_dir)
    assert levels["tagger/episode_return"] == ev["tagger/return"]["mean"]
    assert levels["runner/episode_return"] == ev["runner/return"]["mean"]
    assert levels["tags_per_episode"] == ev["tags_per_episode"]["mean"]
    assert plot_run(run_dir).is_file()
    assert _random_levels(run_dir / "nowhere") == {}


def test_resumed_run_says_where_it_continues(tmp_path, capsys):
    out = tmp_path / "r"
    config = load_config("tag_small_cpu", TINY + ["total_env_steps=256"])  # 4 updates
    train_run(config, out, progress=False, stop_after_updates=2)
    capsys.readouterr()
    result = train_run(None, out, resume=True, progress=True)
    assert result.summary["finished"]
    err = capsys.readouterr().err
    assert f"resuming {out} from update 2/4" in err


def test_train_env_without_config_starts_from_its_shipped_config():
    from jaxwarp.train.config import DEFAULT_CONFIG_FOR_ENV, default_config_for

    assert default_config_for("cartpole") == "cartpole_ppo"
    assert default_config_for("tag_continuous") == "tag_duel_cpu"
    assert default_config_for("acrobot") is None  # TrainConfig's defaults
    for env, name in DEFAULT_CONFIG_FOR_ENV.items():
        assert load_config(name).env == env
