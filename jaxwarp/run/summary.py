"""What a run says when it ends: summary.json (`summarize`: the headline figures
of the last update, rates, devices, why it stopped), then the learning curve
of a finished run (`conclude`)."""

from __future__ import annotations

import math
from typing import Any

from jaxwarp.run.metrics import SUMMARY_FILE, final_means, read_metrics, write_summary
from jaxwarp.run.plot import PLOT_FILE, plot_run
from jaxwarp.run.state import Run
from jaxwarp.run.sweep_report import ranked_metric, write_report
from jaxwarp.storage import writing
from jaxwarp.train import fused
from jaxwarp.units import device_name


def conclude(run: Run) -> dict[str, Any]:
    """Writes summary.json (process 0), raises the run's failure if it has one,
    then for a finished run (process 0) draws its learning curve, or for a
    sweep writes its report (`sweep_report`: ranked table, curves, best.yaml);
    the summary."""
    summary = summarize(run)
    if run.primary:
        with writing(run.out, SUMMARY_FILE):
            write_summary(run.out, summary)
    if run.failure is not None:
        raise run.failure
    if run.done_updates == run.num_updates and run.primary and run.settings:
        with writing(run.out, "the sweep's report"):
            metric = ranked_metric(run.config, list(run.trainer.groups))
            summary["sweep"] = write_report(run.out, run.config, run.settings, metric)
    elif run.done_updates == run.num_updates and run.primary:
        with writing(run.out, PLOT_FILE):
            plot_run(run.out, run.env_metrics)
    return summary


def summarize(run: Run) -> dict[str, Any]:
    """summary.json's contents ("final": the headline figures of the last update;
    "error": why the run stopped, after a non-finite update)."""
    all_rows = read_metrics(run.out) if run.primary else run.rows
    batch = run.trainer.derived.batch_env_steps
    steps_done = len(run.rows) // run.members * batch * run.members
    mesh = run.trainer.mesh
    agents = int(run.trainer.env.num_agents)
    return {
        "env": run.config.env, "backend": run.trainer.env.backend, "seeds": run.seeds,
        "settings": len(run.settings),  # a sweep's (0: a plain run)
        "updates": run.done_updates, "num_updates": run.num_updates,
        "env_steps_per_seed": run.done_updates * batch,
        "compile_s": run.compile_s, "run_s": run.run_s,
        "env_steps_per_s": steps_done / run.run_s if run.run_s > 0 else math.nan,
        "agents_per_env": agents,
        "agent_steps_per_s": steps_done * agents / run.run_s if run.run_s > 0 else math.nan,
        "device": device_name(run.devices),  # the run's, not every device the host has
        "devices": [str(d) for d in run.devices],
        # Devices the envs are split over (all processes) and processes.
        "data_parallel_devices": 1 if mesh is None else int(mesh.size),
        "processes": run.proc.num_processes, "sampler": run.trainer.sampler,
        "rollout": fused.seeds_path(run.trainer.rollout_path, run.trainer.policy,
                                    run.trainer.env, run.trainer.sampler, run.config.num_envs,
                                    run.members),
        "model_layers": dict(run.trainer.model_layers or {}),
        "recurrent_learner": dict(run.trainer.recurrent_learner or {}),
        # the XLA options the program got (jaxwarp.train.compile.compiler_options)
        "compiler_options": dict(run.compiler_options or {}),
        "finished": run.done_updates == run.num_updates, "stopped_early": run.stopped_early,
        "final": final_means(all_rows, run.env_metrics),
    } | ({"error": str(run.failure)} if run.failure is not None else {})
