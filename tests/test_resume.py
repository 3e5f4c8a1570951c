"""`jaxwarp train --resume DIR` beyond continuing a stopped run (issue: a user
trying --resume): a run whose updates are all done but whose outputs of the end
(learning curve, evaluation, GIF) a Ctrl-C left unmade gets them; a finished run
grows with ``total_env_steps=N`` (refused under ``anneal_lr``, whose schedule
depends on the run length); a resumed run evaluates with its own
``--eval-episodes``. Tiny CartPole runs on the pure-JAX backend, as in
test_reliability."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from _tiny_run import TINY, cli, metric_table, tiny_config

from jaxwarp.run import summary as run_summary
from jaxwarp.run.loop import train_run

OUTPUTS = ("learning_curve.png", "eval.json", "trained_vs_random.gif")


def jsonl(out: Path) -> list[dict]:
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def updates(out: Path) -> list[int]:
    return [r["update"] for r in jsonl(out)]


def saved(out: Path) -> dict:
    return yaml.safe_load((out / "config.yaml").read_text())


# ---------------------------------------------------------------------------
# 1 and 3. Ctrl-C after the last update: the resume makes the outputs of the
#    end, with the run's own --eval-episodes.
# ---------------------------------------------------------------------------
def test_ctrl_c_after_the_last_update_then_resume_makes_the_outputs(tmp_path, capsys,
                                                                   monkeypatch):
    out = tmp_path / "run"

    def interrupted_plot(*args, **kwargs):  # Ctrl-C while the curve is drawn
        raise KeyboardInterrupt

    monkeypatch.setattr(run_summary, "plot_run", interrupted_plot)
    code, _, err = cli(capsys, "--out", str(out), *TINY, "--eval-episodes", "3")
    monkeypatch.undo()
    assert code == 130, err
    assert json.loads((out / "summary.json").read_text())["finished"] is True
    assert not any((out / name).exists() for name in OUTPUTS)
    # The message tells what the resume will do, not "continue".
    assert err.strip().splitlines()[-1] == (
        f"jaxwarp train: interrupted; last checkpoint: update 8 in {out / 'checkpoints'}, the "
        f"last of the run's 8; jaxwarp train --resume {out} makes the outputs of its end "
        "(learning curve, evaluation, GIF)")
    assert saved(out)["after_training"] == {"eval_episodes": 3}

    code, stdout, err = cli(capsys, "--resume", str(out))
    assert code == 0, err
    assert f"jaxwarp train: {out} is finished (8/8 updates); making the outputs" in err
    assert all((out / name).exists() for name in OUTPUTS), sorted(p.name for p in out.iterdir())
    evaluation = json.loads((out / "eval.json").read_text())
    assert (evaluation["update"], evaluation["episodes"]) == (8, 3)  # the run's own 3
    assert f"outputs in {out}" in stdout
    assert updates(out) == list(range(1, 9))  # no update trained again

    # Complete with its outputs: today's answer.
    code, stdout, err = cli(capsys, "--resume", str(out))
    assert code == 0 and stdout == "", err
    assert err.startswith(f"jaxwarp train: {out} is already finished (8/8 updates) with its "
                          "outputs; nothing to resume"), err


def interrupt_after(monkeypatch, chunks: int) -> None:
    """KeyboardInterrupt once `chunks` chunks are logged (as Ctrl-C in host code)."""
    from jaxwarp.run.progress import Progress

    advance, done = Progress.advance, []

    def hooked(self, *args):
        advance(self, *args)
        done.append(1)
        if len(done) == chunks:
            raise KeyboardInterrupt

    monkeypatch.setattr(Progress, "advance", hooked)


def test_ctrl_c_in_the_last_chunk_then_resume_makes_the_summary_and_outputs(
        tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    interrupt_after(monkeypatch, 4)  # the last of 4 chunks
    code, _, err = cli(capsys, "--out", str(out), *TINY, "--eval-episodes", "2")
    monkeypatch.undo()
    assert code == 130, err
    assert "the last of the run's 8; jaxwarp train --resume" in err
    assert not (out / "summary.json").exists()
    code, stdout, err = cli(capsys, "--resume", str(out), "--eval-episodes", "4")
    assert code == 0, err
    assert "8/8 updates" in stdout and all((out / name).exists() for name in OUTPUTS)
    # --eval-episodes on the resume wins, and is kept for the next one.
    assert json.loads((out / "eval.json").read_text())["episodes"] == 4
    assert saved(out)["after_training"] == {"eval_episodes": 4}
    assert updates(out) == list(range(1, 9))


def test_resume_of_an_interrupted_run_evaluates_with_its_eval_episodes(tmp_path, capsys,
                                                                      monkeypatch):
    out = tmp_path / "run"
    interrupt_after(monkeypatch, 2)
    code, _, err = cli(capsys, "--out", str(out), *TINY, "--eval-episodes", "3")
    monkeypatch.undo()
    assert code == 130, err
    assert err.strip().splitlines()[-1] == (
        f"jaxwarp train: interrupted; last checkpoint: update 4 in {out / 'checkpoints'}; "
        f"continue with: jaxwarp train --resume {out}")
    code, stdout, err = cli(capsys, "--resume", str(out))  # no --eval-episodes
    assert code == 0, err
    assert "8/8 updates" in stdout
    evaluation = json.loads((out / "eval.json").read_text())
    assert (evaluation["update"], evaluation["episodes"]) == (8, 3)


def test_ctrl_c_during_the_evaluation_says_the_resume_makes_it(tmp_path, capsys, monkeypatch):
    import jaxwarp.cli as cli_module

    out = tmp_path / "run"

    def pressed_during(out_dir, episodes, ctrl_c):  # as if Ctrl-C came in the evaluation
        ctrl_c.pressed = True
        return False

    monkeypatch.setattr(cli_module, "_after_training", pressed_during)
    code, _, err = cli(capsys, "--out", str(out), *TINY, "total_env_steps=32",
                       "--eval-episodes", "2")
    monkeypatch.undo()
    assert code == 130, err
    assert err.strip().splitlines()[-1] == (
        f"jaxwarp train: interrupted during the evaluation; the run's updates are complete in "
        f"{out} (jaxwarp train --resume {out} makes the evaluation and the GIF again)")
    code, _, err = cli(capsys, "--resume", str(out))
    assert code == 0 and "making the outputs" in err, err
    assert json.loads((out / "eval.json").read_text())["episodes"] == 2


# ---------------------------------------------------------------------------
# 2. total_env_steps=N extends a run (anneal_lr off); the rest is refused.
# ---------------------------------------------------------------------------
def test_total_env_steps_extends_a_finished_run_as_a_fresh_longer_run(tmp_path, capsys):
    out, fresh = tmp_path / "run", tmp_path / "fresh"
    # (The CLI's --env starts from the shipped config; the fresh run below does not.)
    first = train_run(tiny_config("anneal_lr=false"), out, progress=False,
                      after_training={"eval_episodes": 0})
    assert first.summary["finished"]
    code, stdout, err = cli(capsys, "--resume", str(out), "total_env_steps=256")
    assert code == 0, err
    assert f"resuming {out} from update 8/16" in err
    assert "16/16 updates" in stdout
    assert updates(out) == list(range(1, 17))  # updates 9..16 follow the first 8
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["updates"], summary["num_updates"], summary["finished"]) == (16, 16, True)
    assert saved(out)["config"]["total_env_steps"] == 256
    assert saved(out)["after_training"] == {"eval_episodes": 0}  # kept from the first run
    # With a constant learning rate nothing depends on the run length: the
    # extended run is the 16-update run, update for update.
    train_run(tiny_config("anneal_lr=false", "total_env_steps=256"), fresh, progress=False)
    assert metric_table(jsonl(out)) == metric_table(jsonl(fresh))


@pytest.fixture(scope="module")
def annealed(tmp_path_factory):
    """A finished 8-update run with anneal_lr (the default), no evaluation asked."""
    out = tmp_path_factory.mktemp("annealed") / "run"
    assert train_run(tiny_config(), out, progress=False,
                     after_training={"eval_episodes": 0}).summary["finished"]
    return out


def test_extending_an_annealed_run_is_refused_with_the_reason(annealed, capsys):
    before = (annealed / "config.yaml").read_text()
    code, stdout, err = cli(capsys, "--resume", str(annealed), "total_env_steps=256")
    assert code == 2 and stdout == "" and err.count("\n") == 1, err
    assert err.startswith(f"jaxwarp train: error: --resume {annealed}: total_env_steps cannot "
                          "grow on a run with anneal_lr=true: its learning rate falls "
                          "linearly to 0 over its 8 updates"), err
    assert "start a new run with total_env_steps=256" in err
    assert (annealed / "config.yaml").read_text() == before and updates(annealed) == \
        list(range(1, 9))


@pytest.mark.parametrize("total", ["128", "140"])
def test_total_env_steps_that_adds_no_update_is_refused(annealed, capsys, total):
    code, _, err = cli(capsys, "--resume", str(annealed), f"total_env_steps={total}")
    if total == "128":  # the run's own total: nothing to extend, the run is complete
        assert code == 0 and "is already finished (8/8 updates)" in err, err
        return
    assert code == 2 and err.count("\n") == 1, err
    assert f"total_env_steps={total} gives 8 updates of 16 env-steps; the run has 8" in err
    assert "to at least total_env_steps=144" in err


@pytest.mark.parametrize("override", ["num_envs=8", "policies.agent.lr=0.1", "anneal_lr=false"])
def test_resume_refuses_other_overrides_naming_the_key(annealed, capsys, override):
    code, _, err = cli(capsys, "--resume", str(annealed), "total_env_steps=256", override)
    key = override.partition("=")[0]
    assert code == 2 and err.count("\n") == 1, err
    assert err.strip() == (f"jaxwarp train: error: --resume DIR takes the run's saved config; "
                           f"'{key}' cannot change on resume: only total_env_steps=N may (to "
                           "extend the run)"), err
