"""`jaxwarp eval` and `jaxwarp render --run`: a run's policies against random ones."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest
from PIL import Image

from jaxwarp import cli
from jaxwarp.run.evaluate import evaluate, load_run, make_policy, matchups, play, summary_line
from jaxwarp.run.loop import train_run
from jaxwarp.train.config import load_config

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
    obs, state = env.reset(jax.random.key(0), 5)
    first = jnp.ones((5,), bool)

    def act(r, which):
        policy = make_policy(r, which)
        actions, carry = policy(jax.random.key(1), obs, state, policy.initial_carry(5), first)
        assert carry == {}  # feed-forward models keep no carry
        return actions

    trained = act(run, {"tagger": True, "runner": True})
    assert trained.shape == (5, env.num_agents, 2) and trained.dtype == jnp.int32
    nvec = np.asarray(env.action_space.nvec)
    assert (np.asarray(trained) >= 0).all() and (np.asarray(trained) < nvec).all()
    # Random groups do not read the policy: zeroed params give the same actions.
    zeroed = dataclasses.replace(run, params=jax.tree.map(jnp.zeros_like, run.params))
    a = act(run, {"tagger": False, "runner": False})
    b = act(zeroed, {"tagger": False, "runner": False})
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
    # header: "trained, seed 0"/"random", step, episode, the two scores, and the
    # legend (tagger, runner: one a line at 32 pixels)
    head = 12 * 7 + 2
    with Image.open(path) as im:
        assert im.size == (32 + 1 + 32, head + 32) and im.n_frames == 4
        im.seek(0)
        frame = np.asarray(im.convert("RGB"))[head:]
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
    from jaxwarp.run.metrics import metric_rows

    head = (run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
    assert head[:5] == ["update", "seed", "env_steps", "env_steps_per_s", "wall_s"]
    for names in (["tagger/loss", "env_steps", "a"], ["env_steps", "agent/loss"]):
        metrics = {k: np.ones((1, 2)) for k in names}
        row = metric_rows(metrics, 0, [0], 1.0, 0.0, 1.0)[0]
        assert list(row)[:5] == head[:5]
        assert list(row)[5:] == sorted(k for k in names if k != "env_steps")


def test_learning_curve_draws_the_levels_of_eval_json(run_dir):
    from jaxwarp.run.plot import _eval_json, _reference_lines, plot_run

    assert cli.main(["eval", "--run", str(run_dir), "--episodes", "4"]) == 0
    ev = json.loads((run_dir / "eval.json").read_text())["matchups"]
    assert _eval_json(run_dir)["matchups"] == ev
    groups, trained = ["tagger", "runner"], {"tagger": True, "runner": True}
    lines = _reference_lines(_eval_json(run_dir), "tagger/episode_return", groups, trained)
    assert lines == [(ev["runner trained"]["tagger/return"]["mean"],
                      "random taggers vs trained runners")]
    # Tag declares tags_per_episode (its episode_metrics): a curve of its own.
    assert json.loads((run_dir / "summary.json").read_text())["final"].keys() >= {
        "tagger/episode_return", "runner/episode_return", "tags_per_episode"}
    lines = _reference_lines(_eval_json(run_dir), "tags_per_episode", groups, trained)
    assert sorted(lines) == sorted([(ev["runner trained"]["tags_per_episode"]["mean"],
                                     "random taggers vs trained runners"),
                                    (ev["tagger trained"]["tags_per_episode"]["mean"],
                                     "random runners vs trained taggers")])
    assert plot_run(run_dir).is_file()
    assert _eval_json(run_dir / "nowhere") is None


def test_resumed_run_says_where_it_continues(tmp_path, capsys):
    out = tmp_path / "r"
    config = load_config("tag_small_cpu", TINY + ["total_env_steps=256"])  # 4 updates
    train_run(config, out, progress=False, stop_after_updates=2)
    capsys.readouterr()
    result = train_run(None, out, resume=True, progress=True)
    assert result.summary["finished"]
    err = capsys.readouterr().err
    assert f"resuming {out} from update 2/4" in err


def test_train_env_without_config_starts_from_its_shipped_config(monkeypatch):
    """The env names its default config (its spec's default_config hook)."""
    import dataclasses

    from jaxwarp import registry
    from jaxwarp.train.config import default_config_for

    assert default_config_for("cartpole") == "cartpole_ppo"
    assert default_config_for("tag_continuous") == "tag_duel_cpu"
    assert default_config_for("acrobot") is None  # TrainConfig's defaults
    assert default_config_for("nope") is None
    for env in registry.registered_envs():
        name = registry.env_spec(env).default_config
        if name is not None:
            assert load_config(name).env == env
    # A new env's own hook is all it takes (no table in jaxwarp.train).
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_SPECS", dict(registry._SPECS))
    spec = dataclasses.replace(registry.env_spec("acrobot"), name="acrobot_copy",
                               default_config="cartpole_ppo")
    registry.register_spec(spec)
    assert default_config_for("acrobot_copy") == "cartpole_ppo"


# ---------------------------------------------------------------------------
# Eval that cannot be silently wrong: every episode finishes, or a clear error.
# ---------------------------------------------------------------------------
def test_eval_fails_clearly_when_episodes_do_not_finish(run_dir, monkeypatch, capsys):
    """An env whose stated length is shorter than its episodes: eval names
    the env, the steps rolled out and how many episodes finished, instead of
    reporting the zeros the unfinished episodes started from."""
    import jaxwarp.run.evaluate as ev

    monkeypatch.setattr(ev, "episode_length", lambda env: 3)  # the tiny run's episodes: 12
    run = load_run(run_dir)
    finished = int(play(run, {"tagger": True, "runner": True}, 4, 0)["finished"].sum())
    assert finished < 4
    msg = (f"eval of tag_continuous: only {finished} of 4 episodes finished within the 3 "
           "steps rolled out (matchup 'trained')")
    with pytest.raises(ev.EpisodesUnfinished, match=re.escape(msg)):
        evaluate(run, episodes=4)
    assert cli.main(["eval", "--run", str(run_dir), "--episodes", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("jaxwarp eval: error: " + msg) and "\n" not in err


def test_mpe_eval_plays_whole_26_step_episodes(tmp_path):
    """MPE episodes last max_steps + 1 = 26 steps (JaxMARL); eval once rolled
    out 25, finished none and printed `trained 0 vs random 0`."""
    out = tmp_path / "spread"
    train_run(load_config("mpe_simple_spread_ppo",
                          ["num_envs=8", "num_steps=8", "total_env_steps=64", "backend=jax"]),
              out, progress=False)
    r = evaluate(load_run(out), episodes=4, seed=0)
    assert r["episode_length"] == 26
    for figs in r["matchups"].values():
        assert figs["finished"]["mean"] == 1.0
    # Random spread: about -27 per agent over 26 steps (never 0).
    assert -60 < r["gain"]["agent"]["random"] < -10
    assert r["gain"]["agent"]["trained"] < -10


# ---------------------------------------------------------------------------
# Seeds: each seed's figures and the pool.
# ---------------------------------------------------------------------------
def _two_seeds(run_dir):
    import jax

    first = load_run(run_dir)
    second = dataclasses.replace(first, params=jax.tree.map(lambda x: x * 0.5, first.params),
                                 seed=1)
    return [first, second]


def test_evaluate_seeds_reports_each_seed_and_the_pool(run_dir):
    from jaxwarp.run.evaluate import evaluate_seeds, seed_lines

    runs = _two_seeds(run_dir)
    r = evaluate_seeds(runs, episodes=4, seed=0)
    assert r["seeds"] == 2 and r["training_seeds"] == [0, 1] and r["episodes"] == 4
    assert [p["training_seed"] for p in r["per_seed"]] == [0, 1]
    assert r["per_seed"][0] == evaluate(runs[0], episodes=4, seed=0)
    # Pooled figures: over all 8 episodes, i.e. the mean of the seeds' means.
    for name, figs in r["matchups"].items():
        for k, s in figs.items():
            per = [p["matchups"][name][k]["mean"] for p in r["per_seed"]]
            assert s["mean"] == pytest.approx(np.mean(per), abs=1e-9)
    # Gain: the mean of the seeds' gains, 95% interval over the 2 seeds:
    # t(0.975, 1 dof) = 12.706; sd = |d0 - d1| / sqrt(2); ci = t sd / sqrt(2).
    for g, s in r["gain"].items():
        d = [p["gain"][g]["delta"] for p in r["per_seed"]]
        assert s["delta"] == pytest.approx(np.mean(d), abs=1e-9)
        assert s["ci95"] == pytest.approx(12.7062047 * abs(d[0] - d[1]) / 2, rel=1e-6)
        assert s["interval"] == "seeds"
        assert s["beats_random"] == (s["delta"] - s["ci95"] > 0)
    json.dumps(r)
    line = summary_line(r)
    assert line.startswith("tag_continuous update 2, 4 episodes x 2 seeds (gain interval over "
                           "seeds): tagger: trained")
    lines = seed_lines(r)
    assert [x.split(":")[0] for x in lines] == ["seed 0", "seed 1"]
    assert lines[0] == f"seed 0: {summary_line(r['per_seed'][0])}"


def test_evaluate_seeds_with_one_seed_and_bad_input(run_dir):
    from jaxwarp.run.evaluate import evaluate_run, evaluate_seeds, load_runs

    runs = load_runs(run_dir)
    assert len(runs) == 1 and runs[0].seed == 0 and runs[0].update == 2
    one = evaluate_seeds(runs, episodes=4, seed=0)
    alone = evaluate(runs[0], episodes=4, seed=0)
    assert one["seeds"] == 1 and seed_lines_of(one) == []
    for g in alone["gain"]:
        assert one["gain"][g] == {**alone["gain"][g], "interval": "episodes"}
    assert evaluate_run(run_dir, episodes=4, seed=0, seed_index=0) == alone
    assert evaluate_run(run_dir, episodes=4, seed=0)["per_seed"] == [alone]
    with pytest.raises(ValueError, match="runs is empty"):
        evaluate_seeds([], episodes=4)
    later = dataclasses.replace(runs[0], update=3)
    with pytest.raises(ValueError, match="different updates"):
        evaluate_seeds([runs[0], later], episodes=4)


def seed_lines_of(result):
    from jaxwarp.run.evaluate import seed_lines

    return seed_lines(result)


# ---------------------------------------------------------------------------
# The learning curve: labelled reference lines, eval in the title, seed bands.
# ---------------------------------------------------------------------------
def _fake_run(out, curves, seeds, eval_json=None, config=None):
    """A run folder with metrics.jsonl (3 updates, `curves` per seed:
    name -> f(update, seed)), summary.json (its "final" names the curves, as
    a run's does), and optionally eval.json and config.yaml."""
    import yaml

    out.mkdir(parents=True)
    rows = []
    for u in (1, 2, 3):
        for s in range(seeds):
            row = {"update": u, "seed": s, "env_steps": 100.0 * u, "env_steps_per_s": 1e3}
            row.update({k: f(u, s) for k, f in curves.items()})
            rows.append(row)
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "summary.json").write_text(json.dumps({"final": {k: None for k in curves}}))
    if eval_json is not None:
        (out / "eval.json").write_text(json.dumps(eval_json))
    if config is not None:
        (out / "config.yaml").write_text(yaml.safe_dump({"config": config.to_dict(),
                                                         "seeds": seeds}, sort_keys=False))
    return out


def _figure_of(out, monkeypatch):
    """plot_run(out) and the figure it drew (its axes, legends, titles)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from jaxwarp.run.plot import plot_run

    drawn = []
    monkeypatch.setattr(plt, "close", lambda fig=None: drawn.append(fig))
    assert plot_run(out).is_file()
    assert len(drawn) == 1
    return drawn[0]


def _legend(ax):
    return ax.get_legend_handles_labels()[1]


def _hline(ax, label):
    """The y of the horizontal line labelled `label`."""
    for line in ax.get_lines():
        if line.get_label() == label:
            y = np.unique(line.get_ydata())
            assert len(y) == 1
            return float(y[0])
    raise AssertionError(f"no line {label!r} in {_legend(ax)}")


def _fig(mean):
    return {"mean": mean, "ci95": 0.1}


TAG_EVAL = {
    "env": "tag_continuous", "update": 3, "episodes": 8, "seeds": 2,
    "matchups": {
        "trained": {"tagger/return": _fig(6.0), "runner/return": _fig(-4.0),
                    "tags_per_episode": _fig(3.0), "finished": _fig(1.0)},
        "random": {"tagger/return": _fig(2.0), "runner/return": _fig(-1.0),
                   "tags_per_episode": _fig(1.0), "finished": _fig(1.0)},
        "tagger trained": {"tagger/return": _fig(7.0), "runner/return": _fig(-5.0),
                           "tags_per_episode": _fig(3.5), "finished": _fig(1.0)},
        "runner trained": {"tagger/return": _fig(1.5), "runner/return": _fig(-0.5),
                           "tags_per_episode": _fig(0.75), "finished": _fig(1.0)}},
    "gain": {"tagger": {"trained": 7.0, "random": 2.0, "delta": 5.0, "ci95": 0.5,
                        "beats_random": True},
             "runner": {"trained": -0.5, "random": -1.0, "delta": 0.5, "ci95": 0.25,
                        "beats_random": True}}}


def test_plot_labels_each_reference_line_for_groups_trained_together(tmp_path, monkeypatch):
    """Two groups trained against each other: each curve gets the level of
    its group playing randomly against the other's trained policy (labelled
    so), not the random-vs-random level, and eval's figures of that matchup in the
    title; two seeds: mean and a shaded 95% band."""
    out = _fake_run(tmp_path / "tag", {
        "tagger/episode_return": lambda u, s: 2.0 + u + s,
        "runner/episode_return": lambda u, s: -3.0 + 0.1 * u - s,
        "tags_per_episode": lambda u, s: 1.0 + 0.5 * u}, seeds=2, eval_json=TAG_EVAL)
    fig = _figure_of(out, monkeypatch)
    axes = {ax.get_title().split("\n")[0].split(" ")[0]: ax for ax in fig.axes}
    assert set(axes) == {"runner/episode_return", "tagger/episode_return", "tags_per_episode",
                         "env-steps/s"}
    tagger, runner, tags = (axes[k] for k in ("tagger/episode_return", "runner/episode_return",
                                              "tags_per_episode"))
    assert _legend(tagger) == ["mean of 2 seeds", "95% interval over seeds",
                               "random taggers vs trained runners"]
    assert _hline(tagger, "random taggers vs trained runners") == 1.5  # runner trained
    assert _legend(runner) == ["mean of 2 seeds", "95% interval over seeds",
                               "random runners vs trained taggers"]
    assert _hline(runner, "random runners vs trained taggers") == -5.0  # tagger trained
    assert sorted(_legend(tags)[2:]) == ["random runners vs trained taggers",
                                         "random taggers vs trained runners"]
    assert _hline(tags, "random runners vs trained taggers") == 3.5
    for ax in fig.axes:
        assert not any("random policy" in label for label in _legend(ax))
    # The subtitle quotes the dashed line's matchup: the other group's final policy.
    assert tagger.get_title() == ("tagger/episode_return (vs training runners)\neval vs the "
                                  "runners' final policy (update 3, 2 seeds): trained 6 vs "
                                  "random 1.5 (dashed)")
    assert _hline(tagger, "random taggers vs trained runners") == 1.5
    assert runner.get_title() == ("runner/episode_return (vs training taggers)\neval vs the "
                                  "taggers' final policy (update 3, 2 seeds): trained -4 vs "
                                  "random -5 (dashed)")
    # The mean line is the mean over seeds: tagger 2 + u + s, s in {0, 1}.
    mean = next(line for line in tagger.get_lines() if line.get_label() == "mean of 2 seeds")
    np.testing.assert_allclose(mean.get_ydata(), [3.5, 4.5, 5.5])


def test_plot_of_a_single_group_and_of_a_frozen_opponent(tmp_path, monkeypatch):
    spread_eval = {"env": "mpe_simple_spread", "update": 3, "episodes": 4,
                   "matchups": {"trained": {"agent/return": _fig(-20.0), "finished": _fig(1.0)},
                                "random": {"agent/return": _fig(-27.5), "finished": _fig(1.0)}},
                   "gain": {"agent": {"trained": -20.0, "random": -27.5, "delta": 7.5,
                                      "ci95": 1.0, "beats_random": True}}}
    out = _fake_run(tmp_path / "spread", {"agent/episode_return": lambda u, s: -26.0 + u},
                    seeds=1, eval_json=spread_eval)
    ax = _figure_of(out, monkeypatch).axes[0]
    assert _legend(ax) == ["seed 0", "random agents (jaxwarp eval)"]
    assert _hline(ax, "random agents (jaxwarp eval)") == -27.5
    assert ax.get_title() == ("agent/episode_return\neval vs random (update 3): trained -20 vs "
                              "random -27.5, +7.5 ± 1")
    # Runners not trained: the taggers' level is against their fixed policy.
    config = load_config("tag_small_cpu", ["policies.runner.train=false"])
    out = _fake_run(tmp_path / "frozen", {"tagger/episode_return": lambda u, s: float(u),
                                          "runner/episode_return": lambda u, s: -float(u)},
                    seeds=1, eval_json=TAG_EVAL, config=config)
    axes = _figure_of(out, monkeypatch).axes
    assert _legend(axes[1]) == ["seed 0", "random taggers vs runners' fixed (untrained) policy"]


def test_plot_ignores_an_eval_json_with_unfinished_episodes(tmp_path, monkeypatch):
    from jaxwarp.run.plot import _eval_json

    stale = json.loads(json.dumps(TAG_EVAL))
    stale["matchups"]["random"]["finished"] = _fig(0.0)  # written before the eval fix
    out = _fake_run(tmp_path / "stale", {"tagger/episode_return": lambda u, s: float(u),
                                         "runner/episode_return": lambda u, s: -float(u)},
                    seeds=1, eval_json=stale)
    assert _eval_json(out) is None
    for ax in _figure_of(out, monkeypatch).axes[:2]:
        assert _legend(ax) == ["seed 0"] and "eval" not in ax.get_title()


def test_seed_band_is_the_t_interval_over_the_seeds_that_have_a_value():
    from jaxwarp.run.plot import seed_band

    vals = np.array([[1.0, 3.0], [np.nan, 2.0], [np.nan, np.nan], [2.0, 2.0]])
    mean, lo, hi = seed_band(vals)
    # Row 0: mean 2, sd sqrt(2), half width t(0.975, 1) * sqrt(2) / sqrt(2) = 12.706.
    np.testing.assert_allclose(mean[[0, 1, 3]], [2.0, 2.0, 2.0])
    np.testing.assert_allclose([lo[0], hi[0]], [2.0 - 12.7062047, 2.0 + 12.7062047], rtol=1e-6)
    assert np.isnan(lo[1]) and np.isnan(hi[1])  # one seed: no interval
    assert np.isnan(mean[2])
    assert lo[3] == hi[3] == 2.0


def test_eval_beside_a_live_run_reads_only(run_dir, tmp_path, monkeypatch):
    """A checkpoint the run is still writing (unreadable for a moment) and one
    rotated away while eval lists them: eval reads the newest it can, moves
    nothing, and tries again when the list changed under it."""
    import shutil

    from jaxwarp.run import checkpoint

    out = tmp_path / "live"
    shutil.copytree(run_dir, out)
    (out / "checkpoints" / "99").mkdir()  # being written: no metadata yet
    update = load_run(out).update
    assert update == 2 and (out / "checkpoints" / "99").is_dir()
    assert not (out / "checkpoints_corrupt").exists()
    real, calls = checkpoint.checkpoint_steps, []

    def rotating(folder):  # the first listing names a checkpoint already rotated away
        calls.append(1)
        return [7, *real(folder)] if len(calls) == 1 else real(folder)

    monkeypatch.setattr(checkpoint, "checkpoint_steps", rotating)
    newest = checkpoint._newest_intact
    monkeypatch.setattr(checkpoint, "_newest_intact", lambda o, steps, a: (
        (None, [(7, "gone")]) if 7 in steps else newest(o, steps, a)))
    assert load_run(out).update == 2 and len(calls) >= 2

