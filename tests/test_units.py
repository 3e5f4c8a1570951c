"""Throughput units (issue 40): every rate names env-steps/s, agent-steps/s and
the device (`jaxwarp.units`), in the CLI's summary line too."""

from __future__ import annotations

import math
from types import SimpleNamespace

from jaxwarp.units import device_name, rate_text, si


def test_si_three_significant_digits():
    assert si(1_234_567) == "1.23M" and si(456_000) == "456K" and si(9.8e9) == "9.8G"
    assert si(12.5) == "12.5" and si(math.nan) == "n/a"


def test_rate_text_gives_both_units_and_the_device():
    # 2,000 envs x 110 agents: 1.1M env-steps/s is 121M agent-steps/s.
    assert rate_text(1.1e6, 110, "NVIDIA H100 80GB HBM3") == \
        "1.1M env-steps/s (121M agent-steps/s) on NVIDIA H100 80GB HBM3"
    assert rate_text(5e5, 1, "cpu") == "500K env-steps/s (500K agent-steps/s) on cpu"
    assert rate_text(5e5, None) == "500K env-steps/s"
    assert rate_text(math.nan, 110, "cpu") == "no steps timed on cpu"


def test_device_name_counts_devices_of_a_kind():
    h = SimpleNamespace(device_kind="NVIDIA H200", platform="gpu")
    c = SimpleNamespace(device_kind="cpu", platform="cpu")
    assert device_name([h]) == "NVIDIA H200" and device_name([h, h]) == "2 x NVIDIA H200"
    assert device_name([h, c]) == "1 x NVIDIA H200, 1 x cpu"
    assert device_name([]) == "no device"
    assert device_name()  # this process's devices


def test_cli_summary_line_names_both_units_and_the_device(monkeypatch, tmp_path, capsys):
    from jaxwarp.cli import main
    from jaxwarp.run import loop

    def fake_train_run(config, out, **kwargs):
        summary = {"updates": 2, "num_updates": 2, "env_steps_per_seed": 4096, "seeds": 1,
                   "env_steps_per_s": 2.5e5, "agents_per_env": 3, "device": "cpu",
                   "compile_s": 1.0, "final": {}, "finished": True}
        return SimpleNamespace(summary=summary, out_dir=tmp_path)

    monkeypatch.setattr(loop, "train_run", fake_train_run)
    assert main(["train", "--env", "mpe_simple_spread", "--out", str(tmp_path / "r"),
                 "--eval-episodes", "0", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "250K env-steps/s (750K agent-steps/s) on cpu (compile 1.0 s)" in out
