"""Is the recurrent peer as fast as JaxMARL's own scripts? One process, one GPU.

`rnn_reference.py` (IPPO-RNN and MAPPO-RNN, written from the published
algorithms) stands in for JaxMARL in `bench_time_to_return.py`; a comparison
against it means something only if it runs at the original's speed. This
script times, at the same settings and in the same process:

* ``jaxmarl``: JaxMARL's published ``baselines/IPPO/ippo_rnn_mpe.py`` and
  ``baselines/MAPPO/mappo_rnn_mpe.py``, imported unchanged from a checkout of
  https://github.com/FLAIROx/JaxMARL (``--jaxmarl DIR``; its ``jaxmarl``
  package is imported from there too, so script and env are one commit), run
  with their yaml configs (``TOTAL_TIMESTEPS`` from ``--total-steps``).
  ``hydra``, ``omegaconf`` and ``wandb`` are used by those scripts only around
  ``make_train`` (the command line, and ``wandb.log`` in a per-update host
  callback, a no-op with the configs' ``WANDB_MODE: disabled``); where they are
  not installed, stand-ins with the same no-op behaviour are put in their place
  and the callback still runs every update. ``distrax`` must be installed;
* ``peer``: `rnn_reference.make_train` at the same settings (via
  `bench_time_to_return.run_peer`);
* ``jaxwarp``: jaxwarp's trainer at the same settings (via
  `bench_time_to_return.run_jaxwarp`: ``model=gru``, MAPPO with
  ``critic=centralised``).

Each side is one program, ``jax.jit(jax.vmap(train))`` over ``--seeds`` keys
(JaxMARL's scripts run one seed; their ``train`` vmaps as it is), compiled
first and timed apart, then run once to ``block_until_ready``.
env-steps/s = seeds x total env-steps / run seconds.

    python experiments/peer_check_rnn.py --jaxmarl ../JaxMARL --total-steps 2000000
    python experiments/peer_check_rnn.py --jaxmarl ../JaxMARL --small   # CPU smoke

On the GPU machine (no network) the extra packages travel as wheels (see the
device notes in `bench_time_to_return.py`): distrax, tfp-nightly (the released
tensorflow-probability 0.25 fails to import under jax 0.10), dm-tree,
decorator, gast, gymnax, gymnasium, farama-notifications.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import jax
import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# case -> (bench_time_to_return case, JaxMARL script, its config)
CASES = {
    "ippo": ("mpe_rnn", "baselines/IPPO/ippo_rnn_mpe.py",
             "baselines/IPPO/config/ippo_rnn_mpe.yaml"),
    "mappo": ("mpe_mappo", "baselines/MAPPO/mappo_rnn_mpe.py",
              "baselines/MAPPO/config/mappo_homogenous_rnn_mpe.yaml"),
}


def stand_ins(logged: list[dict[str, Any]]) -> None:
    """No-op ``hydra``, ``omegaconf`` and ``wandb`` where they are not installed;
    ``wandb.log`` keeps what the script logs (its return curve)."""
    def missing(name: str) -> bool:
        return importlib.util.find_spec(name) is None

    if missing("hydra"):
        hydra = types.ModuleType("hydra")
        hydra.main = lambda **_: (lambda f: f)
        sys.modules["hydra"] = hydra
    if missing("omegaconf"):
        omegaconf = types.ModuleType("omegaconf")
        omegaconf.OmegaConf = types.SimpleNamespace(to_container=dict)
        sys.modules["omegaconf"] = omegaconf
    wandb = types.ModuleType("wandb")  # always ours: nothing leaves the machine
    wandb.init = lambda **_: None
    wandb.log = lambda d: logged.append({k: float(np.asarray(v).mean()) for k, v in d.items()})
    sys.modules["wandb"] = wandb


def read_config(path: Path) -> dict[str, Any]:
    """A JaxMARL yaml config as hydra reads it (PyYAML leaves ``5e-4`` a string)."""
    def number(v: Any) -> Any:
        if isinstance(v, str):
            try:
                return float(v)
            except ValueError:
                return v
        return v

    return {k: number(v) for k, v in yaml.safe_load(path.read_text()).items()}


def load_script(jaxmarl: Path, rel: str) -> types.ModuleType:
    """JaxMARL's script `rel` as a module (its ``main`` is not run)."""
    path = jaxmarl / rel
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_jaxmarl(jaxmarl: Path, case: str, hp: dict[str, Any], seeds: int, seed: int,
                small: bool, logged: list[dict[str, Any]]) -> dict[str, Any]:
    """Timings of JaxMARL's own script for `case`, its batch and length from `hp`
    (the yaml's at the paper scale)."""
    from bench_time_to_return import _timed

    _, script, cfg = CASES[case]
    config = read_config(jaxmarl / cfg)
    config.update(TOTAL_TIMESTEPS=hp["total_env_steps"], NUM_ENVS=hp["num_envs"],
                  NUM_STEPS=hp["num_steps"])
    if small:
        config.update(FC_DIM_SIZE=16, GRU_HIDDEN_DIM=16)
    train = load_script(jaxmarl, script).make_train(dict(config))
    keys = jax.numpy.stack([jax.random.PRNGKey(seed + i) for i in range(seeds)])
    logged.clear()
    compile_s, run_s, _ = _timed(train, keys)
    returns = [r["returns"] for r in logged if "returns" in r]
    return {"impl": f"jaxmarl_{case}_rnn", "script": script, "config": cfg,
            "settings": {k: config[k] for k in sorted(config) if k.isupper()},
            "num_updates": int(config["TOTAL_TIMESTEPS"] // config["NUM_STEPS"]
                               // config["NUM_ENVS"]),
            "num_envs": config["NUM_ENVS"],
            "batch_env_steps": config["NUM_ENVS"] * config["NUM_STEPS"],
            "compile_s": compile_s, "run_s": run_s,
            "callbacks": len(logged), "last_returns": returns[-5:]}


def commit_of(path: Path) -> str | None:
    """The JaxMARL commit: its git's, or a copy's ``COMMIT`` file (``git archive``)."""
    if (path / "COMMIT").is_file():
        return (path / "COMMIT").read_text().strip()
    try:
        return subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def rate(run: dict[str, Any], seeds: int) -> float:
    return seeds * run["num_updates"] * run["batch_env_steps"] / run["run_s"]


def check_case(args: argparse.Namespace, case: str, scale: str, logged: list
               ) -> list[dict[str, Any]]:
    """The three sides of `case` at `scale` (the gpu scale runs 4x the env-steps)."""
    import bench_time_to_return as b
    from jaxwarp.units import device_name, rate_text

    steps = args.total_steps * (4 if scale == "gpu" else 1)
    hp = b.hyperparameters(CASES[case][0], scale, steps)
    if args.small:
        hp.update(num_envs=4, num_steps=16, hidden_sizes=(16,), rnn_size=16)
    rows = [run_jaxmarl(args.jaxmarl, case, hp, args.seeds, args.seed, args.small, logged),
            b.run_peer(CASES[case][0], hp, args.seeds, args.seed),
            b.run_jaxwarp(CASES[case][0], hp, "cuda" if jax.default_backend() == "gpu"
                          else "cpu", args.seeds, args.seed)]
    for r in rows:
        r["case"], r["scale"] = case, scale
        r["env_steps_per_s"] = rate(r, args.seeds)
        r["agent_steps_per_s"] = 3 * r["env_steps_per_s"]  # simple_spread: 3 agents
        for k in ("returns", "episodes"):  # curves: not needed for a speed check
            r.pop(k, None)
    base = rows[0]["env_steps_per_s"]
    for r in rows:
        r["vs_jaxmarl"] = r["env_steps_per_s"] / base
        print(f"{case:6s} {scale:5s} {r['impl']:22s} "
              f"{rate_text(r['env_steps_per_s'], 3, device_name(jax.devices()[:1]))}  compile "
              f"{r['compile_s']:5.1f} s  run {r['run_s']:6.1f} s  x{r['vs_jaxmarl']:.2f}",
              flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jaxmarl", type=Path, required=True,
                    help="a checkout of github.com/FLAIROx/JaxMARL")
    ap.add_argument("--cases", default="ippo,mappo")
    ap.add_argument("--scales", default="paper",
                    help="paper: the yaml's 16 envs x 128 steps; gpu: 1,024 x 32 "
                         "(bench_time_to_return's gpu scale)")
    ap.add_argument("--total-steps", type=int, default=2_000_000,
                    help="env-steps per seed at the paper scale (gpu: 4x)")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--small", action="store_true", help="tiny sizes, for a CPU")
    ap.add_argument("--out", default="experiments/results/peer_check_rnn.json")
    args = ap.parse_args()
    sys.path.insert(0, str(args.jaxmarl.resolve()))  # JaxMARL's own jaxmarl package
    logged: list[dict[str, Any]] = []
    stand_ins(logged)
    import ippo_reference
    ippo_reference.import_gymnax()  # JaxMARL's wrappers import gymnax (seaborn: see there)
    from jaxwarp.benchmark import run_meta

    rows = []
    for case, scale in itertools.product(args.cases.split(","), args.scales.split(",")):
        rows += check_case(args, case, scale, logged)
        meta = {**run_meta(), "jaxmarl_commit": commit_of(args.jaxmarl),
                "jaxmarl_source": "https://github.com/FLAIROx/JaxMARL", "seeds": args.seeds}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"meta": meta, "results": rows}, indent=2,
                                             default=float))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
