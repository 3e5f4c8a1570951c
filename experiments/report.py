"""docs/benchmarks.md from the result files behind the README's tables.

Every figure on the page is read from a file under experiments/results/, and
every table names its file(s) with the device, commit and command that the
file records (``commit: not recorded`` for files written before
``jaxwarp.benchmark.run_meta`` existed; the command is then the one that
makes such a file, marked so). Nothing here runs a benchmark. Where result
files were merged into one to keep the folder small, each keeps its old name
as a part of the merged file (``Source.part``), cited as such. A file whose rows
are runs of several commits records the commit and command in each row
(``row_sources`` cites each run).

Throughput is in env-steps/s, with agent-steps/s (env-steps x agents per env,
jaxwarp.units) beside it where an env has more than one agent, and each table
says its device. The agents per env come from the result file; files written
before runs recorded them name a shipped config or an env, whose agents per env
are in ``AGENTS`` (checked against the configs by tests/test_report.py).

    python experiments/report.py                 # write docs/benchmarks.md
    python experiments/report.py --check         # exit 1 if it is not up to date
    python experiments/report.py --curve-csv experiments/results/learn_tag_h100/learn_tag.json

``--curve-csv`` moves the per-update curves of a ``learn_tag.py`` or
``learn_compare.py`` result into a CSV beside it (the JSON keeps the summary),
the form in which curves are committed. tests/test_report.py checks that the
committed page equals this script's output and that every cited file exists.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import shlex
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from jaxwarp.units import si

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path("experiments/results")
PAGE = Path("docs/benchmarks.md")

H100 = "NVIDIA H100 80GB HBM3"

# Agents per env of the shipped configs and of envs (``env`` at its default
# parameters, ``env[config]`` at a named env config), for result files written
# before runs recorded them (tests/test_report.py checks these against the
# configs and envs as they are now).
AGENTS = {
    "cartpole_ppo": 1, "mpe_simple_spread_ppo": 3, "tag_duel_cpu": 7, "tag_chase": 110,
    "tag_warpdrive_default": 110, "tag_2000_envs": 110, "tag_100_agents": 110,
    "tag_1000_agents": 1000,
    "cartpole": 1, "pendulum": 1, "mpe_simple_spread": 3, "tag_continuous": 110,
    "tag_continuous[warpdrive_default]": 110,
}


def agents_of(name: str, overrides: Iterable[str] = (), params: dict | None = None
              ) -> int | None:
    """Agents per env of shipped config or env `name` (``AGENTS``); None where
    overrides or env parameters could change them."""
    if any(re.match(r"(env|env_config|env_params\.num_\w+)=", o) for o in overrides):
        return None
    params = dict(params or {})
    config = params.pop("config", None)
    if params:
        return None
    return AGENTS.get(f"{name}[{config}]" if config else name)


# ---------------------------------------------------------------------------
# Sources: a result file and what it records about itself.

@dataclass(frozen=True)
class Source:
    """One cited result file.

    path: relative to experiments/results/.
    makes: the command that makes such a file, shown where the file does not
      record its own.
    device: for files that do not record it (logs, CSV, images).
    part: where several result files were merged into one (to keep the folder
      small), the name the part was committed under: a merged JSON holds it
      unchanged under ``files[part]``, a merged log under a ``==> part <==``
      header (then ``$ command``), a merged CSV in the rows whose ``file``
      column is ``part``.
    """
    path: str
    makes: str
    device: str | None = None
    part: str | None = None


def _read_json(root: Path, src: Source) -> dict:
    data = json.loads((root / RESULTS / src.path).read_text())
    return data["files"][src.part] if src.part else data


def _meta(root: Path, src: Source) -> dict:
    if src.path.endswith(".log"):
        # A log may open with "# commit SHA, device..." and "# command" lines.
        head = (root / RESULTS / src.path).read_text().splitlines()[:2]
        m = re.match(r"# commit (\w+)", head[0]) if head else None
        if m and len(head) == 2 and head[1].startswith("# "):
            return {"commit": m.group(1), "command": head[1][2:].split(" (")[0]}
        return {}
    if not src.path.endswith(".json"):
        return {}
    data = _read_json(root, src)
    meta = dict(data.get("meta") or {})
    for key in ("device", "date"):  # older files keep these at the top level
        if key not in meta and isinstance(data.get(key), str):
            meta[key] = data[key]
    return meta


def device_of(root: Path, src: Source) -> str | None:
    """The device a file records (or its Source gives)."""
    meta = _meta(root, src)
    device = (meta.get("device_kind") if str(meta.get("device", "")).startswith(("cuda:", "gpu:"))
              else meta.get("device")) or src.device
    if device is None and src.path.endswith(".json") and isinstance(
            _read_json(root, src).get("machine"), str):
        device = _read_json(root, src)["machine"]
    if device is None and "cpu" in meta:
        device = f"{meta['cpu']}, {meta.get('cores', '?')} cores"
    return device


def devices(root: Path, *srcs: Source) -> str:
    """The device(s) the files of a table record."""
    found = list(dict.fromkeys(d for d in (device_of(root, s) for s in srcs) if d))
    return " and ".join(found) or "a device not recorded"


def on(root: Path, *srcs: Source) -> str:
    """"on DEVICE" for a table's text."""
    return f"on {devices(root, *srcs)}"


def cite(root: Path, src: Source) -> str:
    """`file` · device · commit · command, as recorded in the file."""
    meta = _meta(root, src)
    device = device_of(root, src)
    commit = meta.get("commit") or "not recorded"
    if meta.get("dirty") is True and not commit.endswith("+dirty"):
        commit += "+dirty"  # files that record it apart: tracked files differed from the commit
    if meta.get("command"):
        command = code(meta["command"])
    elif meta.get("argv") is not None:
        script = shlex.split(src.makes)[1]
        command = f"`{shlex.join(['python', script, *meta['argv']])}` (from the file's argv)"
    else:
        command = f"not recorded; made by `{src.makes}`"
    date = f" · {meta['date']}" if meta.get("date") else ""
    part = f" (part `{src.part}`)" if src.part else ""
    return (f"`{RESULTS / src.path}`{part} · {device or 'device not recorded'}{date} · "
            f"commit: {commit} · command: {command}")


# Modules that moved since a result file named them (recorded text, current path).
MOVED = {"jaxwarp/train/mlp_kernel.py": "jaxwarp/models/mlp_kernel.py"}


def _moved(text: str) -> str:
    """A result file's text with the paths of moved modules as they are now."""
    for old, new in MOVED.items():
        text = text.replace(old, new)
    return text


def code(text: str) -> str:
    """text as a markdown code span (double backticks where it holds one)."""
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def sources_block(root: Path, sources: Iterable[Source]) -> list[str]:
    return ["", *(f"Source: {cite(root, s)}" + "  " for s in sources), ""]


# ---------------------------------------------------------------------------
# Number formats.

def sig(x: float, digits: int = 3) -> str:
    """x with `digits` significant digits, thousands separated (12,345)."""
    if x == 0 or not math.isfinite(x):
        return str(x)
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(x)))))
    return f"{x:,.{decimals}f}"


def mega(x: float) -> str:
    return sig(x / 1e6)


def ratio(x: float) -> str:
    return f"{x:.2f}×" if x < 10 else f"{sig(x)}×"


def kilo_or_mega(x: float) -> str:
    return f"{sig(x / 1e6)}M" if x >= 1e6 else f"{sig(x / 1e3)}K"


def rate(env_steps_per_s: float, agents: int | None, fmt: Callable[[float], str] = mega,
         also: str = "") -> str:
    """env-steps/s as `fmt` writes it, with agent-steps/s (jaxwarp.units.si) in
    brackets where an env has more than one agent (one agent: the same figure);
    `also`: more for the brackets."""
    inside = [f"{si(env_steps_per_s * agents)} agent-steps/s"] if agents and agents > 1 else []
    inside += [also] if also else []
    return fmt(env_steps_per_s) + (f" ({'; '.join(inside)})" if inside else "")


AGENT_STEPS = ("with agent-steps/s (env-steps × agents per env) in brackets where an env has "
               "more than one agent")


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


# ---------------------------------------------------------------------------
# Sections. Each returns (markdown lines, cited sources).

Section = Callable[[Path], tuple[list[str], list[Source]]]

TAG = Source("tag_final_h100.json",
             "python experiments/bench_contract_envs.py --tag "
             "--tag-configs warpdrive_default large")
TAG_HASHED = Source("tag_final_hashed_h100.json",
                    "python experiments/bench_contract_envs.py --tag --hashed --no-jax")
TAG_10K = Source("tag_final_10000_runs_h100.json",
                 "python experiments/bench_contract_envs.py --tag --tag-configs agents_10000 "
                 "--no-jax", part="tag_final_10000_h100.json")
TAG_10K_HASHED = Source("tag_final_10000_runs_h100.json",
                        "python experiments/bench_contract_envs.py --tag "
                        "--tag-configs agents_10000 --no-jax --hashed",
                        part="tag_final_10000_hashed_h100.json")


def _shipped(rows: list[dict]) -> list[dict]:
    """The shipped build's rows of a file that may hold kernel variants
    (backend "cuda" or "cuda[]" is the build without extra flags)."""
    return [r for r in rows if r["backend"] in ("cuda", "cuda[]", "jax")]


def section_tag(root: Path) -> tuple[list[str], list[Source]]:
    proto = _shipped(_read_json(root, TAG)["results"])
    hashed = _shipped(_read_json(root, TAG_HASHED)["results"])
    big = _read_json(root, TAG_10K)["results"][0]
    big_hashed = _read_json(root, TAG_10K_HASHED)["results"][0]
    rows = []
    for config in ("warpdrive_default", "large"):
        k = next(r for r in proto if r["params"]["config"] == config and r["backend"] == "cuda")
        j = next(r for r in proto if r["params"]["config"] == config and r["backend"] == "jax")
        h = next(r for r in hashed if r["params"]["config"] == config)
        n = k["num_agents"]
        rows.append([f"`{config}`", f"{k['num_envs']:,} × {n:,}",
                     rate(k["env_steps_per_s"], n), rate(j["env_steps_per_s"], n),
                     ratio(k["over_jax"]), rate(h["env_steps_per_s"], n)])
    n = big["num_agents"]
    rows.append([f"`large` scaled to 10,000 agents ({big['params']['num_taggers']:,} + "
                 f"{big['params']['num_runners']:,}, L = {big['params']['grid_length']:g})",
                 f"{big['num_envs']:,} × {n:,}", rate(big["env_steps_per_s"], n),
                 "does not fit (N × N arrays)", "—", rate(big_hashed["env_steps_per_s"], n)])
    large = next(r for r in proto if r["params"]["config"] == "large")
    wd = 2.9e6  # WarpDrive's paper (arXiv:2108.13976): env-steps/s at large's size
    lines = [
        "## Tag (`tag_continuous`): kernel vs its pure-JAX twin",
        "",
        "`experiments/bench_contract_envs.py --tag`: the `cuda` kernel and the pure-JAX reference "
        "of the same env side by side in one process, their timed calls alternating (11 rounds; "
        "each figure the median call, each ratio the median of the per-round ratios). "
        "*Protocol*: each step's actions are a hash of the previous step's observations, so "
        "neither side can skip work a policy would need; *kernel alone*: actions hashed from the "
        "step index on the device. M env-steps/s (one env-step = all agents of one env) "
        f"{on(root, TAG, TAG_HASHED, TAG_10K, TAG_10K_HASHED)}, {AGENT_STEPS}:",
        "",
        *table(["config", "envs × agents", "kernel, protocol", "pure JAX, protocol",
                "kernel / pure JAX", "kernel alone"], rows),
        "",
        f"WarpDrive's paper reports {sig(wd / 1e6, 2)} M env-steps/s (its figure counts "
        f"env-steps: {si(wd * large['num_agents'])} agent-steps/s) at `large`'s size "
        f"({large['num_envs']:,} envs × {large['num_agents']:,} agents; kernel alone, on a GPU "
        "it does not name; arXiv:2108.13976), so the two are not side by side. The pure-JAX "
        "twin's "
        "k-nearest search builds N × N distance arrays, which at 10,000 agents per env do not fit "
        "in the GPU's memory.",
    ]
    srcs = [TAG, TAG_HASHED, TAG_10K, TAG_10K_HASHED]
    return lines + sources_block(root, srcs), srcs


PYCUDA = Source("ablation_pycuda_h100.json", "python experiments/ablation_launch.py --pycuda")


def section_launch(root: Path) -> tuple[list[str], list[Source]]:
    rows = [[f"`{r['env']}`", f"{r['num_envs']:,}", sig(r["pycuda_loop_us_per_step"]),
             sig(r["jax_loop_us_per_step"]), sig(r["fused_us_per_step"]),
             ratio(r["fused_over_pycuda"]), "yes" if r["final_state_identical"] else "no"]
            for r in _read_json(root, PYCUDA)["results"]]
    lines = [
        "## WarpDrive's launch model vs one fused program",
        "",
        "`experiments/ablation_launch.py --pycuda`: the same generated kernel launched once per "
        "step through PyCUDA with a context sync (WarpDrive's execution model, on JAX-owned "
        "buffers), the jitted step called from a Python loop, and the steps fused in one "
        f"`lax.scan`, from the same reset and the same pre-drawn actions. µs per step "
        f"(a step of all envs), {on(root, PYCUDA)}:",
        "",
        *table(["env", "envs", "PyCUDA loop + sync", "jax loop + sync", "fused `lax.scan`",
                "fused vs PyCUDA", "same final state"], rows),
    ]
    return lines + sources_block(root, [PYCUDA]), [PYCUDA]


CONTRACT = Source("bench_contract_envs_h100.json", "python experiments/bench_contract_envs.py")


def _contract_rows(root: Path, envs: tuple[str, ...], upstream: str | None) -> list[list[str]]:
    res = _read_json(root, CONTRACT)["results"]
    rows = []
    for k in res:
        if k["env"] not in envs or k["backend"] != "cuda":
            continue
        same = [r for r in res if r["env"] == k["env"] and r["num_envs"] == k["num_envs"]]
        j = next(r for r in same if r["backend"] == "jax")
        n = k["num_agents"]
        row = [f"`{k['env']}`", f"{k['num_envs']:,}", str(n),
               rate(k["env_steps_per_s"], n), rate(j["env_steps_per_s"], n),
               ratio(k["over_jax"])]
        if upstream is not None:  # the same env upstream: the same agents per env
            u = next(r for r in same if r["backend"] == upstream)
            row += [rate(u["env_steps_per_s"], u.get("num_agents") or n),
                    ratio(k[f"over_{upstream}"])]
        rows.append(row)
    return rows


def _contract_intro(root: Path) -> str:
    return (
        "`experiments/bench_contract_envs.py`: the kernel (`cuda`), the env's pure-JAX "
        "reference (`jax`) and the upstream JAX implementation under `vmap`, each stepped by "
        "the benchmark protocol in one jitted `lax.scan`, timed calls alternating in one "
        "process (11 rounds; medians of calls and of per-round ratios); the upstream figures "
        f"are measured here, in env-steps/s as ours. M env-steps/s {on(root, CONTRACT)}, "
        f"{AGENT_STEPS}:")


def section_mpe(root: Path) -> tuple[list[str], list[Source]]:
    rows = _contract_rows(root, ("mpe_simple_spread", "mpe_simple_tag"), "jaxmarl")
    return ["## MPE: kernel vs JaxMARL 0.2.0", "", _contract_intro(root), "",
            *table(["env", "envs", "agents", "kernel", "pure-JAX twin", "kernel / twin",
                    "JaxMARL", "kernel / JaxMARL"], rows),
            *sources_block(root, [CONTRACT])], [CONTRACT]


def section_cartpole(root: Path) -> tuple[list[str], list[Source]]:
    rows = _contract_rows(root, ("cartpole",), "gymnax")
    return ["## CartPole: kernel vs gymnax 1.0.1", "", _contract_intro(root), "",
            *table(["env", "envs", "agents", "kernel", "pure-JAX twin", "kernel / twin",
                    "gymnax", "kernel / gymnax"], rows),
            *sources_block(root, [CONTRACT])], [CONTRACT]


# Envs with a table of their own (section_tag, section_mpe, section_cartpole).
_OWN_TABLE = ("tag_continuous", "mpe_simple_spread", "mpe_simple_tag", "cartpole")


def section_other_envs(root: Path) -> tuple[list[str], list[Source]]:
    from jaxwarp.registry import builtin_envs  # the built-ins (imports every env module)

    others = tuple(e for e in builtin_envs() if e not in _OWN_TABLE) + ("goal_reach",)
    rows = _contract_rows(root, others, None)
    return ["## Other envs: kernel vs pure-JAX twin", "",
            "Same run as the two tables above (`goal_reach` is the custom-env tutorial's "
            f"example). M env-steps/s {on(root, CONTRACT)}, {AGENT_STEPS}:", "",
            *table(["env", "envs", "agents", "kernel", "pure-JAX twin", "kernel / twin"],
                   rows), *sources_block(root, [CONTRACT])], [CONTRACT]


ENVPOOL = Source("bench_envpool_cpu.json", "python experiments/bench_envpool.py")
ENVPOOL_PENDULUM = Source("bench_envpool_pendulum_cpu.json",
                          "python experiments/bench_envpool.py --env Pendulum-v1")
_ENVPOOL_ROWS = [
    ("envpool_threads0", "EnvPool 1.2.5, default threads (one per core)"),
    ("envpool_threads1", "EnvPool 1.2.5, 1 thread"),
    ("jaxwarp_gym", "jaxwarp Gymnasium adapter (`infos[\"final_obs\"]`)"),
    ("jaxwarp_gym_nocopy", "the same, `copy=False`"),
    ("jaxwarp_gym_no_final_obs", "the same, `final_obs=False`"),
    ("jaxwarp_jitted_step", "the adapter's jitted step alone (no NumPy, no per-step sync)"),
]


def _envpool_table(root: Path, src: Source) -> list[str]:
    res = _read_json(root, src)["results"]
    header = ["M env-steps/s (1 agent per env: = M agent-steps/s)",
              *(f"{r['num_envs']:,} envs" for r in res)]
    rows = [[label, *(mega(r[key]["env_steps_per_s"]) for r in res)]
            for key, label in _ENVPOOL_ROWS]
    best = [max(r["envpool_threads0"]["env_steps_per_s"], r["envpool_threads1"]["env_steps_per_s"])
            for r in res]
    rows.append(["adapter (`final_obs`) / EnvPool's best",
                 *(ratio(r["jaxwarp_gym"]["env_steps_per_s"] / b) for r, b in zip(res, best))])
    return table(header, rows)


def section_envpool(root: Path) -> tuple[list[str], list[Source]]:
    pend = _read_json(root, ENVPOOL_PENDULUM)["meta"].get("note", "")
    lines = [
        "## CPU: Gymnasium adapter vs EnvPool",
        "",
        "`experiments/bench_envpool.py`: EnvPool (sync mode, `batch_size == num_envs`) and the "
        "jaxwarp Gymnasium adapter (`cpu` backend) stepped from the same Python loop with NumPy "
        "actions drawn before timing; 50 warm-up steps, median of 5 runs interleaved across "
        "implementations. The machine (2 cores) was shared with other jobs, so the figures are "
        "noisy.",
        "",
        f"CartPole-v1, {on(root, ENVPOOL)}:",
        "",
        *_envpool_table(root, ENVPOOL),
        "",
        f"Pendulum-v1 ({pend}), {on(root, ENVPOOL_PENDULUM)}:",
        "",
        *_envpool_table(root, ENVPOOL_PENDULUM),
    ]
    srcs = [ENVPOOL, ENVPOOL_PENDULUM]
    return lines + sources_block(root, srcs), srcs


TORCH = Source("bench_torch_adapter_h100.json", "python experiments/bench_torch_adapter.py")
THREADS = Source("bench_cpu_threads.json", "python experiments/bench_cpu_threads.py --all")


def section_host(root: Path) -> tuple[list[str], list[Source]]:
    trows = [[f"`{r['env']}`", f"{r['num_envs']:,}", sig(r["torch_loop"]["us_per_step"]),
              sig(r["jitted_scan"]["us_per_step"]), ratio(r["scan_over_torch"])]
             for r in _read_json(root, TORCH)["results"]]
    res = _read_json(root, THREADS)["results"]
    crows = []
    for one in (r for r in res if r["cores"] == 1):
        two = next(r for r in res if r["env"] == one["env"] and r["cores"] > 1)
        n = one.get("num_agents") or agents_of(one["env"])
        crows.append([f"`{one['env']}`", f"{one['num_envs']:,}", rate(one["env_steps_per_s"], n),
                      rate(two["env_steps_per_s"], n),
                      ratio(two["env_steps_per_s"] / one["env_steps_per_s"])])
    lines = [
        "## Host round trips: the torch adapter on the GPU",
        "",
        "`experiments/bench_torch_adapter.py`: the torch adapter (DLPack, no copies) stepped from "
        "a Python loop with torch actions on the GPU, against the same env stepped inside one "
        f"jitted `lax.scan`. µs per step (a step of all envs), {on(root, TORCH)}:",
        "",
        *table(["env", "envs", "torch loop", "jitted scan", "scan vs torch loop"], trows),
        *sources_block(root, [TORCH]),
        "## CPU backend: cores",
        "",
        "`experiments/bench_cpu_threads.py --all`: a jitted rollout on the `cpu` backend pinned "
        "to one core, then on both; the handlers split envs over XLA:CPU's own thread pool "
        f"(same bits for any thread count). M env-steps/s {on(root, THREADS)}, {AGENT_STEPS}:",
        "",
        *table(["env", "envs", "1 core", "2 cores", "speed-up"], crows),
    ]
    return lines + sources_block(root, [THREADS]), [TORCH, THREADS]


TRAIN = Source("train_h100.json", "python experiments/bench_train.py",
               part="bench_train_h100.json")
KERNEL = Source("train_h100.json", "python experiments/bench_mlp_kernel.py --train 3,6,7",
                part="mlp_kernel_train_h100.json")
LAYERS = Source("train_h100.json", "python experiments/bench_mlp_kernel.py",
                part="mlp_kernel_h100.json")
H100_BF16_PEAK = 989e12
EQUIV = Source("learner_equivalence_h100.json", "bash experiments/tools/gpu_learner_check.sh")
SAMPLER = Source("bench_sampler_h100.json", "python experiments/bench_sampler.py")


def _dtype(r: dict) -> str:
    return "/".join(sorted(r["matmul_flops_per_update"]))


# The leading columns of every `_train_rows` table.
TRAIN_HEAD = ["config", "overrides", "algorithm", "envs × agents", "env-steps per update",
              "matmuls"]


def _train_rows(results: list[dict], backends: tuple[str, ...]) -> list[list[str]]:
    rows = []
    for k in (r for r in results if r["backend"] == backends[0]):
        row = [f"`{k['config']}`", " ".join(f"`{o}`" for o in k["overrides"]) or "—",
               k["algorithm"], f"{k['num_envs']:,} × {k['num_agents']}",
               f"{k['batch_env_steps']:,}", _dtype(k)]
        share = k["rollout_seconds_per_update"] / k["seconds_per_update"]
        row.append(rate(k["env_steps_per_s"], k["num_agents"], kilo_or_mega,
                        also=f"rollout {share:.0%}"))
        if len(backends) > 1:
            j = next(r for r in results if r["backend"] == backends[1]
                     and r["config"] == k["config"] and r["overrides"] == k["overrides"])
            jshare = j["rollout_seconds_per_update"] / j["seconds_per_update"]
            row += [rate(j["env_steps_per_s"], j["num_agents"], kilo_or_mega,
                         also=f"rollout {jshare:.0%}"),
                    ratio(k["env_steps_per_s"] / j["env_steps_per_s"])]
        row += [f"{k['mfu']:.1%}" if k.get("mfu") is not None else "—", f"{k['compile_s']:.0f}"]
        rows.append(row)
    return rows


def section_training(root: Path) -> tuple[list[str], list[Source]]:
    head = TRAIN_HEAD
    lines = [
        "## Training throughput",
        "",
        "`experiments/bench_train.py`: whole updates (rollout: policy forward per group, sampler "
        "custom call, env-step custom call; GAE; Optax steps) in one jitted `lax.scan`, compile "
        "excluded, median of timed calls after a warm-up; the same trainer with the kernel env "
        "and sampler (`cuda`) and with the pure-JAX env and `jax.random.categorical` (`jax`) in "
        f"one process, {on(root, TRAIN)}. env-steps/s (in brackets: agent-steps/s, env-steps × "
        "agents per env, and the rollout's share of an update); MFU: the "
        "update's matmul FLOPs (counted from its jaxpr) at the H100's dense peak (bf16 989 "
        "TFLOP/s, f32 at the TF32 peak 495) over the measured time; compile in seconds (`cuda`):",
        "",
        *table([*head, "cuda", "jax", "cuda / jax", "MFU (cuda)", "compile s"],
               _train_rows(_read_json(root, TRAIN)["results"], ("cuda", "jax"))),
        *sources_block(root, [TRAIN]),
    ]
    lines += _kernel_lines(root)
    eq = _read_json(root, EQUIV)
    erows = [[f"`{c}`", _moved(p["trainer"]), ", ".join(f"{x:.1f}" for x in p["final_tags_per_episode"]),
              pm(p["summary"]["mean"], p["summary"]["ci95"]),
              rate(sum(p["env_steps_per_s"]) / len(p["env_steps_per_s"]),
                   agents_of(eq["config"], eq["overrides"]), kilo_or_mega)]
             for c, p in eq["commits"].items()]
    lines += [
        "### The same learning",
        "",
        f"`{eq['config']}` with {' '.join(f'`{o}`' for o in eq['overrides'])} (taggers against "
        f"runners moving at random), {eq['env_steps']:,} env-steps, seeds 0-{eq['seeds'] - 1}, "
        f"each commit's whole tree on the same GPU ({devices(root, EQUIV)}); tags per episode "
        "at the end (moving mean over "
        "the last 5% of updates; random taggers "
        f"{eq['random_tags_per_episode']:.1f}), mean ± 95% interval over seeds; env-steps/s "
        f"(mean over seeds) {AGENT_STEPS}:",
        "",
        *table(["commit", "trainer", "per seed", "mean", "env-steps/s"], erows),
    ]
    both = eq.get("tag_100_agents")
    if both:
        lines += [
            "",
            f"`{both['config']}` (both groups learn), {both['env_steps']:,} env-steps, seeds "
            f"0-{both['seeds'] - 1}, at {both['meta']['commit']} on one GPU "
            f"({both['meta']['device']}), the fused kernels against XLA's layers in one "
            f"process (`{both['command'].split(' (')[0]}`; random taggers "
            f"{both['random_tags_per_episode']:.1f} tags per episode):",
            "",
            *table(["layers", "tags per episode, per seed", "mean", "runners' return"],
                   [[name.replace("_", " "),
                     ", ".join(f"{x:.1f}" for x in v["final_tags_per_episode"]),
                     pm(v["tags"]["mean"], v["tags"]["ci95"]),
                     pm(v["runner_return"]["mean"], v["runner_return"]["ci95"])]
                    for name, v in both["variants"].items()]),
        ]
    lines += sources_block(root, [EQUIV])
    data = _read_json(root, SAMPLER)
    rows = []
    for k in (r for r in data["results"] if r["backend"] == "cuda"):
        j = next(r for r in data["results"] if r["backend"] == "jax"
                 and r["rows"] == k["rows"] and r["nvec"] == k["nvec"])
        rows.append([f"{k['rows']:,}", str(tuple(k["nvec"])), sig(k["us_per_draw"]),
                     sig(j["us_per_draw"]), ratio(j["us_per_draw"] / k["us_per_draw"])])
    lines += [
        "### The action sampler",
        "",
        "`experiments/bench_sampler.py`: `jaxwarp.sample_actions` (one custom call for every "
        "head of a MultiDiscrete action, the same random bits as `jax.random.categorical`) "
        f"against `jax.random.categorical` per head. µs per draw, {on(root, SAMPLER)}:",
        "",
        *table(["rows", "nvec", "kernel", "`jax.random.categorical`", "speed-up"], rows),
    ]
    return lines + sources_block(root, [SAMPLER]), [TRAIN, KERNEL, LAYERS, EQUIV, SAMPLER]


def _kernel_lines(root: Path) -> list[str]:
    """The fused MLP kernels against XLA's layers, end to end."""
    res = _read_json(root, KERNEL)["train"]
    rows = []
    for k in (r for r in res if r["backend"] == "cuda" and r["layers"] == "kernel"):
        same = [r for r in res if r["case_index"] == k["case_index"]]
        x = next(r for r in same if r["layers"] == "xla")
        j = next(r for r in same if r["backend"] == "jax")
        # MFU from the XLA program's matmul FLOPs (the jaxpr count misses the
        # kernels' own): the same model arithmetic per update
        flops = sum(x["matmul_flops_per_update"].values())
        peak = H100_BF16_PEAK if "bfloat16" in x["matmul_flops_per_update"] else (
            H100_BF16_PEAK / 2)
        rows.append([
            f"`{k['config']}`", " ".join(f"`{o}`" for o in k["overrides"]) or "—",
            k["algorithm"], _dtype(k),
            rate(k["env_steps_per_s"], k["num_agents"], kilo_or_mega),
            rate(x["env_steps_per_s"], x["num_agents"], kilo_or_mega),
            ratio(k["env_steps_per_s"] / x["env_steps_per_s"]),
            f"{1e3 * k['seconds_per_update']:.1f} / {1e3 * x['seconds_per_update']:.1f}",
            f"{1e3 * k['rollout_seconds_per_update']:.1f} / "
            f"{1e3 * x['rollout_seconds_per_update']:.1f}",
            f"{flops / k['seconds_per_update'] / peak:.1%} / {x['mfu']:.1%}",
            ratio(k["env_steps_per_s"] / j["env_steps_per_s"])])
    return [
        "### The fused MLP kernels",
        "",
        "`experiments/bench_mlp_kernel.py --train`: bench_train.py's cases with the `mlp` "
        "model's layers as the Pallas kernels (`jaxwarp/models/mlp_kernel.py`: every layer of a "
        "row tile on chip) and as XLA's matmuls, and the pure-JAX env backend (on the kernels), "
        f"in one process, {on(root, KERNEL)}. ms per update and ms of rollout: kernels / XLA; "
        "MFU: the XLA program's matmul FLOPs per update (its jaxpr count; the kernels' are "
        "the same arithmetic) over each time, at the H100's dense peak:",
        "",
        *table(["config", "overrides", "algorithm", "matmuls", "kernels", "XLA's layers",
                "speed-up", "ms / update", "ms rollout", "MFU", "kernel env vs pure JAX"],
               rows),
        *sources_block(root, [KERNEL]),
        *_layer_lines(root),
    ]


def _layer_lines(root: Path) -> list[str]:
    """The kernels' first version, layer timings against XLA's."""
    rows, data = [], _read_json(root, LAYERS)
    for r in data["results"]:
        for k in r["kernel"]:
            rows.append([r["case"], f"{r['rows']:,}", f"{k['rows']} × {k['warps']}",
                         f"{1e3 * k['forward_s']:.3f} / {1e3 * r['xla']['forward_s']:.3f}",
                         ratio(r["xla"]["forward_s"] / k["forward_s"]),
                         f"{r['forward_flops'] / k['forward_s'] / 1e12:.0f}",
                         f"{1e3 * k['grad_s']:.3f} / {1e3 * r['xla']['grad_s']:.3f}",
                         ratio(r["xla"]["grad_s"] / k["grad_s"])])
    return [
        "",
        "The Tag model alone (bf16, shared 256-256 torso, 71 inputs, 43 logits; a minibatch "
        "of the A2C row and one rollout step's rows), the kernels' first version (its "
        "backward recomputed the forward), per tile (rows per program × warps, forward and "
        "backward alike), ms kernels / XLA's layers, the forward's TFLOP/s, "
        f"{on(root, LAYERS)} ({data['meta']['commit_note']}):",
        "",
        *table(["case", "rows", "tile", "forward ms", "speed-up", "TFLOP/s",
                "forward + backward ms", "speed-up"], rows),
        *sources_block(root, [LAYERS]),
    ]


LEARNER = Source("train_learner_variants_h200.json", "bash experiments/tools/gpu_learner_ab.sh")
# The A/B is finished: its script and head_pad8.patch compared trainers of a47679a and
# c07c73f and were then deleted (they patch files that have moved since).
LEARNER_HISTORY = ("The variants are trainers of earlier commits, so this table is reproduced "
                   "from git history: `git log --all -- experiments/tools/gpu_learner_ab.sh "
                   "experiments/patches/head_pad8.patch` finds the script and the patch.")
PROFILE = Source("profile_phases_h200.json", "python experiments/profile_phases.py")
PROFILE_GRU = Source("profile_phases_gru_h200.json", "python experiments/profile_phases.py")
PROFILE_GRU_PAPER = Source("profile_phases_gru_paper_h200.json",
                           "python experiments/profile_phases.py")
PROFILE_MPE = Source("profile_phases_mpe_bf16_h200.json", "python experiments/profile_phases.py")
RECURRENT = Source("bench_recurrent_h200.json",
                   "cd experiments && python bench_recurrent.py --sizes jaxmarl,gpu")
RECURRENT_NOW = Source("bench_recurrent_scan_h200.json",
                       "python experiments/bench_recurrent.py --models gru,mlp")


PEER_CHECK = Source("peer_check_rnn_h200.json",
                    "python experiments/peer_check_rnn.py --jaxmarl JAXMARL_CHECKOUT")
PEER_SIDES = {"jaxmarl": "JaxMARL's own script", "peer": "`rnn_reference.py`",
              "jaxwarp": "jaxwarp (`model=gru`)"}


def row_sources(root: Path, src: Source, rows: list[dict], label: Callable[[dict], str],
                what: str = "rows") -> list[str]:
    """Source lines of a file whose rows record their own commit, command and date
    (rows of several runs in one file): one line per run, naming its rows."""
    runs: dict[tuple, list[str]] = {}
    for r in rows:
        runs.setdefault((r["commit"], r["command"], r.get("date")), [])
        if label(r) not in runs[r["commit"], r["command"], r.get("date")]:
            runs[r["commit"], r["command"], r.get("date")].append(label(r))
    return ["", *(f"Source: `{RESULTS / src.path}` ({what} {', '.join(names)}) · "
                  f"{device_of(root, src)}{f' · {date}' if date else ''} · commit: {commit} · "
                  f"command: {code(command)}  " for (commit, command, date), names in runs.items()),
            ""]


def _peer_check_lines(root: Path) -> list[str]:
    """JaxMARL's published recurrent scripts beside the peer and jaxwarp."""
    data = _read_json(root, PEER_CHECK)
    side = lambda r: "jaxwarp" if r["impl"] == "jaxwarp" else (  # noqa: E731
        "jaxmarl" if r["impl"].startswith("jaxmarl") else "peer")
    rows = [[f"{r['case'].upper()}-RNN", r["scale"],
             f"{r['num_envs']:,} × {r['batch_env_steps'] // r['num_envs']}",
             PEER_SIDES[side(r)], rate(r["env_steps_per_s"], 3, kilo_or_mega),
             f"{r['compile_s']:.1f}", ratio(r["vs_jaxmarl"])] for r in data["results"]]
    return [
        "### The recurrent peers against JaxMARL's scripts",
        "",
        "JaxMARL's published `baselines/IPPO/ippo_rnn_mpe.py` and "
        "`baselines/MAPPO/mappo_rnn_mpe.py` (commit "
        f"`{data['meta']['jaxmarl_commit'][:7]}`, imported unchanged with their yaml configs), "
        "the pure-JAX peer `experiments/rnn_reference.py` that `bench_time_to_return.py` "
        "compares against, and jaxwarp at the same settings, one seed each, one process, "
        f"{on(root, PEER_CHECK)}; the gpu scale is 1,024 envs × 32 steps. env-steps/s "
        "(agent-steps/s in brackets), compile in seconds, and the rate against JaxMARL's "
        f"script; 10⁶ env-steps at the paper scale, 4 × 10⁶ at the gpu scale. The file's "
        f"note: {data['meta']['commit_note']}.",
        "",
        *table(["algorithm", "scale", "envs × steps", "side", "env-steps/s", "compile s",
                "vs JaxMARL"], rows),
        *row_sources(root, PEER_CHECK, data["results"],
                     lambda r: f"{r['case'].upper()}-RNN {r['scale']}"),
    ]


def _recurrent_lines(root: Path) -> list[str]:
    """The GRU learner's paths against the MLP at the same size."""
    results = _read_json(root, RECURRENT)["results"]
    mlp = {r["size"]: r for r in results if r["model"] == "mlp"}
    steps = {r["size"]: r for r in results if r["model"] == "gru_steps"}
    rows = [[f"{r['num_envs']:,} × {r['num_steps']}",
             f"`{r['model']}`" + (" + command buffers" if r["command_buffers"] else ""),
             ", ".join(f"{v}" for v in r["recurrent_learner"].values()) or "-",
             rate(r["env_steps_per_s"], r["num_agents"], kilo_or_mega),
             f"{r['ms_per_update']:.1f}",
             ratio(r["env_steps_per_s"] / steps[r["size"]]["env_steps_per_s"]),
             ratio(mlp[r["size"]]["env_steps_per_s"] / r["env_steps_per_s"])]
            for r in results]
    return [
        "### The recurrent learner",
        "",
        "MPE `simple_spread` at JaxMARL's IPPO-RNN settings (GRU 128 over a 128-unit "
        "embedding, relu, 4 epochs × 2 minibatches) at its size and at a GPU size, one "
        f"process ({on(root, RECURRENT)}): `gru` runs its sequence form in the learner (the "
        "cell's scan with a hand-written backward), `gru_autodiff` the same form "
        "differentiated by jax, `gru_steps` the model replayed step by step (the path "
        "before the sequence form), `mlp` the same hidden layer without recurrence. "
        "env-steps/s (agent-steps/s in brackets), ms per update, against `gru_steps`, and "
        "the MLP's rate over the row's:",
        "",
        *table(["envs × steps", "model", "learner", "env-steps/s", "ms / update",
                "vs `gru_steps`", "`mlp` ÷ row"], rows),
        *sources_block(root, [RECURRENT]),
        *_recurrent_now_lines(root),
        *_gru_profile_lines(root),
    ]


def _recurrent_now_lines(root: Path) -> list[str]:
    """The shipped GRU against the MLP, measured again after the scan's changes."""
    results = _read_json(root, RECURRENT_NOW)["results"]
    mlp = {r["size"]: r for r in results if r["model"] == "mlp"}
    rows = [[f"{r['num_envs']:,} × {r['num_steps']}",
             f"`{r['model']}`" + (" + command buffers" if r["command_buffers"] else ""),
             rate(r["env_steps_per_s"], r["num_agents"], kilo_or_mega),
             f"{r['ms_per_update']:.1f}",
             ratio(mlp[r["size"]]["env_steps_per_s"] / r["env_steps_per_s"])]
            for r in results]
    return [
        "",
        "The same benchmark for the shipped `gru` (its scan stacking two outputs a step and "
        "its loops indexing time in place, docs/decisions.md) and the `mlp` "
        f"({on(root, RECURRENT_NOW)}); env-steps/s (agent-steps/s in brackets), ms per update, "
        "and the MLP's rate over the row's:",
        "",
        *table(["envs × steps", "model", "env-steps/s", "ms / update", "`mlp` ÷ row"], rows),
        *sources_block(root, [RECURRENT_NOW]),
    ]


def _gru_profile_lines(root: Path) -> list[str]:
    """What bounds the GRU update: its kernels' time against the span they fill."""
    lines = []
    for src, size, name in ((PROFILE_GRU, "gpu", "the GPU size"),
                            (PROFILE_GRU_PAPER, "jaxmarl", "JaxMARL's size")):
        prof = _read_json(root, src)
        gpu = prof["gpus"][0]
        untraced = next(r["ms_per_update"] for r in _read_json(root, RECURRENT_NOW)["results"]
                        if r["size"] == size and r["model"] == "gru" and not r["command_buffers"])
        rows = [[ph["phase"], f"{ph['ms']:.2f}", f"{ph['share']:.1%}",
                 ", ".join(f"{k[:40]} {v:.2f}" for k, v in ph["top_kernels"][:2])]
                for ph in prof["phases"]]
        lines += [
            "",
            f"The `gru` update at {name}, by phase ({_case(prof['config'], prof['overrides'])},"
            f" one seed, command buffers off, {on(root, src)}): {gpu['kernels']:,} "
            f"kernels an update for {gpu['kernel_ms']:.1f} ms of kernel time, about "
            f"{1e3 * gpu['kernel_ms'] / gpu['kernels']:.1f} µs each (the scans' steps: a few "
            "small kernels each, forward and backward, every epoch and minibatch, and the "
            f"rollout's steps). Untraced, the update takes {untraced:.1f} ms "
            "(`bench_recurrent.py` above, XLA's default command buffers; "
            f"the trace's span, {gpu['span_ms']:.1f} ms, holds the profiler's own cost): the "
            "update is bound by how many small kernels it runs, each a few microseconds "
            "whatever its work, not by the GPU's arithmetic or memory. ms per update, "
            "share of kernel time, and the largest kernels (ms):",
            "",
            *table(["phase", "ms", "share", "largest kernels"], rows),
            *sources_block(root, [src]),
        ]
    return [*lines, *_gru_scan_lines(root)]


PEER_PROFILE = Source("peer_profile_h200.json", "python experiments/tools/peer_profile.py")


def _gru_scan_lines(root: Path) -> list[str]:
    """The GRU's scan variants and the compile options, seeds vmapped."""
    results = _read_json(root, PEER_PROFILE)["results"]
    rows = []
    for data in results:
        hp, runs = data["hyperparameters"], data["runs"]
        steps = hp["num_envs"] * hp["num_steps"] * data["seeds"]
        agents = 3  # MPE simple_spread, both cases
        first = next(r for k, r in runs.items() if k != "peer")["s_per_update"]
        for name, r in runs.items():
            marks = " ".join(f"`{m}`" for m in (r.get("overrides") or []))
            rows.append([data["what"], str(data["seeds"]),
                         f"`{name}`" + (f" {marks}" if marks else ""),
                         f"{1e3 * r['s_per_update']:.1f}",
                         rate(steps / r["s_per_update"], agents, kilo_or_mega),
                         f"{r['device_ms_per_update']:.1f}", f"{r['kernels_per_update']:,.0f}",
                         ratio(first / r["s_per_update"])])
    return [
        "",
        "### The GRU's scan and the compile options, seeds vmapped",
        "",
        "`experiments/tools/peer_profile.py` on the time-to-return runs of "
        "`bench_time_to_return.py` (`jax.jit(jax.vmap(train))` over the seeds, shortened to a few "
        "updates; IPPO-RNN at 1,024 × 32, and MPE's feed-forward IPPO at the same size), "
        f"{on(root, PEER_PROFILE)}. Markers: the scan variants of "
        "`experiments/gru_scan_variants.py` (`@folded_scan`: `gru_scan` over plain `lax.scan`s, "
        "shipped until commit 843acd6, the group's `default` before it; `@seed_major`: the "
        "shipped `gru_scan`, its loops `scan_batch_first`; `@unrollK`: `@folded_scan` "
        "unrolled K steps); "
        "`@cublas`, `@deterministic`, `@product_jit` "
        "compile with one or both of `jaxwarp train`'s options (`jaxwarp.train.compile`), the "
        "others with jax's defaults; `@flat_adam` runs Adam over the raveled parameters "
        "(`optax.flatten`); `@no_shuffle` replaces the minibatch permutation by the identity "
        "(a bound, not a learner). Per run: ms per update (wall), env-steps/s (agent-steps/s in "
        "brackets), device ms and kernels per update from a trace, and the speed against the "
        "first jaxwarp run of its group:",
        "",
        *table(["group", "seeds", "run", "ms / update", "env-steps/s", "device ms", "kernels",
                "vs the group's first"], rows),
        *row_sources(root, PEER_PROFILE, results, lambda r: r["what"], what="for"),
    ]


def _case(config: str, overrides: list[str]) -> str:
    return " ".join(f"`{o}`" for o in [config, *overrides])


_RECURRENT_SOURCES = [RECURRENT, RECURRENT_NOW, PROFILE_GRU, PROFILE_GRU_PAPER, PEER_CHECK,
                      PEER_PROFILE]


def section_learner(root: Path) -> tuple[list[str], list[Source]]:
    data = _read_json(root, LEARNER)
    base = {r["config"]: r for r in data["results"]["base"]}
    rows = []
    for name, results in data["results"].items():
        for r in results:
            rows.append([f"`{name}`", f"`{r['config']}`", r["algorithm"],
                         f"{r['num_envs']:,} × {r['num_agents']}", _dtype(r),
                         rate(r["env_steps_per_s"], r["num_agents"], kilo_or_mega),
                         f"{r['seconds_per_update'] * 1e3:.1f}",
                         ratio(r["env_steps_per_s"] / base[r["config"]]["env_steps_per_s"]),
                         f"{r['compile_s']:.1f}"])
    lines = [
        "### Learner variants",
        "",
        "Variants of the trainer, each `experiments/bench_train.py --backends cuda` in its own "
        f"process, one after another on one GPU ({devices(root, LEARNER)}): "
        + "; ".join(f"`{k}`: {v}" for k, v in data["meta"]["variants"].items())
        + ". Cases: " + "; ".join(f"{_case(r['config'], r['overrides'])}"
                                  for r in data["results"]["base"])
        + ". env-steps/s (agent-steps/s in brackets), ms per update, env-steps/s against `base`, "
        "compile in seconds:",
        "",
        *table(["variant", "config", "algorithm", "envs × agents", "matmuls", "env-steps/s",
                "ms / update", "vs `base`", "compile s"], rows),
        *sources_block(root, [LEARNER]),
        LEARNER_HISTORY,
        "",
    ]
    prof = _read_json(root, PROFILE)
    cases = prof["cases"]
    names = list(cases)
    phases = [ph["phase"] for ph in cases[names[0]]["phases"]]
    prow = []
    for phase in phases:
        row = [phase]
        for name in names:
            ph = next(x for x in cases[name]["phases"] if x["phase"] == phase)
            row += [f"{ph['ms']:.2f}", f"{ph['share']:.1%}", f"{ph['matmul_tflop']:.2f}"]
        prow.append(row)
    prow.append(["whole update", *(v for name in names for v in (
        f"{cases[name]['ms_per_update']:.2f}",
        f"{sum(ph['share'] for ph in cases[name]['phases']):.0%}",
        f"{sum(ph['matmul_tflop'] for ph in cases[name]['phases']):.2f}"))])
    lines += [
        "### Where an update's time goes",
        "",
        "`experiments/profile_phases.py`: one update's GPU kernels from a profiler trace, each "
        "attributed to a phase of the update; per phase ms per update, share of the update "
        f"and matmul TFLOP per update, {on(root, PROFILE)}. Cases: "
        + "; ".join(f"`{n}` = {_case(c['config'], c['overrides'])}" for n, c in cases.items())
        + f" (the command the file records is the first's). The file's note: {prof['note']}.",
        "",
        *table(["phase", *(f"{h} (`{n}`)" for n in names
                           for h in ("ms", "share", "TFLOP"))], prow),
        *sources_block(root, [PROFILE]),
        "",
        *_recurrent_lines(root),
        "",
        *_peer_check_lines(root),
    ]
    return lines, [LEARNER, PROFILE, *_RECURRENT_SOURCES]


_PROFILE_CMD = "python experiments/profile_phases.py"
TAIL_PROFILES = [  # (label, file): the learner's tail, before and after (H200)
    ("A2C bf16, before", Source("profile_phases_a2c_bf16_h200.json", _PROFILE_CMD)),
    ("A2C bf16, c4795e9", Source("profile_phases_a2c_bf16_tail_h200.json", _PROFILE_CMD)),
    ("A2C bf16, 177dae9", Source("profile_phases_a2c_bf16_recompute_h200.json", _PROFILE_CMD)),
    ("A2C f32", Source("profile_phases_a2c_f32_h200.json", _PROFILE_CMD)),
]
_TRAIN_CMD = "python experiments/bench_train.py --backends cuda"
TAIL_VARIANTS = [  # each file one variant of the trainer, run one after another in one call
    Source("bench_train_tail_before_h200.json", _TRAIN_CMD),
    Source("bench_train_heads_autodiff_h200.json", _TRAIN_CMD),
    Source("bench_train_heads_recompute_h200.json", _TRAIN_CMD),
    Source("bench_train_heads_h200.json", _TRAIN_CMD),
    Source("bench_train_relu_before_h200.json", _TRAIN_CMD),
    Source("bench_train_relu_h200.json", _TRAIN_CMD),
]
TAIL_TRAIN = Source("bench_train_tail_h200.json", "python experiments/bench_train.py --cases "
                    "2,3,6,7")
TAIL_TTR = Source("time_to_return_tail_h200.json", "python experiments/bench_time_to_return.py "
                  "--cases mpe,cartpole --scale gpu")


def _tail_variant_rows(root: Path, sources: list[Source] | None = None) -> list[list[str]]:
    rows = []
    for src in TAIL_VARIANTS if sources is None else sources:
        data = _read_json(root, src)
        for r in data["results"]:
            rows.append([f"`{src.path}`", data["meta"].get("note", ""),
                         _case(r["config"], r["overrides"]), _dtype(r),
                         rate(r["env_steps_per_s"], r["num_agents"], kilo_or_mega),
                         f"{r['seconds_per_update'] * 1e3:.1f}", f"{r['compile_s']:.1f}"])
    return rows


def _tail_profile_rows(root: Path, profiles: list | None = None) -> list[list[str]]:
    profs = [_read_json(root, src) for _, src in (profiles or TAIL_PROFILES)]
    rows = []
    for phase in [ph["phase"] for ph in profs[0]["phases"]]:
        row = [phase]
        for prof in profs:
            ph = next((x for x in prof["phases"] if x["phase"] == phase), None)
            row += ["—", "—"] if ph is None else [f"{ph['ms']:.2f}", f"{ph['floor_ms']:.2f}"]
        rows.append(row)
    rows.append(["whole update", *(v for prof in profs
                                   for v in (f"{prof['ms_per_update']:.2f}", ""))])
    return rows


TRAIN_BOTH_HEAD = [*TRAIN_HEAD, "`cuda` env-steps/s", "`jax` env-steps/s", "cuda / jax", "MFU",
                   "compile s"]


def _learner_kernels(prof: dict, n: int) -> list[str]:
    """The n largest kernels of a phase profile's forward and backward: kernel,
    phase, ms per update, GB its HLO instruction moves, ms at the copy bandwidth."""
    kernels = sorted(((k, ph["phase"]) for ph in prof["phases"] if ph["phase"] in (
        "forward", "backward") for k in ph["kernels"]), key=lambda kp: -kp[0][1])[:n]
    return table(["kernel", "phase", "ms", "GB", "floor ms"],
                 [[f"`{k[0]}`", p, f"{k[1]:.2f}", f"{k[2]:.2f}", f"{k[3]:.2f}"]
                  for k, p in kernels])


def section_learner_tail(root: Path) -> tuple[list[str], list[Source]]:
    now = _read_json(root, TAIL_PROFILES[1][1])
    head = TRAIN_BOTH_HEAD
    lines = [
        "### The learner's tail",
        "",
        f"Trainer variants at Tag's scale {on(root, *TAIL_VARIANTS)}, each file one variant, "
        "each in its own process, one after another (what the variant is: the file's note). "
        "env-steps/s (agent-steps/s in brackets), ms per update, compile in seconds:",
        "",
        *table(["file", "variant", "case", "matmuls", "env-steps/s", "ms / update",
                "compile s"], _tail_variant_rows(root)),
        *sources_block(root, TAIL_VARIANTS),
        f"The shipped trainer, both env backends in one process, {on(root, TAIL_TRAIN)}; "
        f"env-steps/s {AGENT_STEPS}:",
        "",
        *table(head, _train_rows(_read_json(root, TAIL_TRAIN)["results"], ("cuda", "jax"))),
        *sources_block(root, [TAIL_TRAIN]),
        "`experiments/profile_phases.py` (command buffers off): ms per update by phase and the "
        "phase's floor (matmul FLOPs at peak or the bytes its kernels move at the copy "
        "bandwidth, whichever is larger; Pallas kernels' FLOPs are not counted, and the "
        "rollout's bytes count the env kernel's whole state buffers, which it updates in "
        "place, so its floor is overstated), "
        f"{on(root, *(s for _, s in TAIL_PROFILES))} (177dae9: the heads' backward "
        "recomputing the log-softmax, measured and replaced):",
        "",
        *table(["phase", *(f"{h} ({label})" for label, _ in TAIL_PROFILES
                           for h in ("ms", "floor ms"))], _tail_profile_rows(root)),
        "",
        f"The largest learner kernels then ({TAIL_PROFILES[1][0]}): kernel, phase, ms per update, "
        "GB its HLO instruction moves, ms at the copy bandwidth:",
        "",
        *_learner_kernels(now, 12),
        *sources_block(root, [s for _, s in TAIL_PROFILES]),
        f"Time to a return at GPU sizes with the tail trimmed, {on(root, TAIL_TTR)}; "
        f"env-steps/s {AGENT_STEPS}:",
        "",
        *_time_to_return_table(root, TAIL_TTR),
    ]
    return lines, [*TAIL_VARIANTS, TAIL_TRAIN, *(s for _, s in TAIL_PROFILES), TAIL_TTR]


HEADS_VARIANTS = [  # pairs run back to back in one call: before, then the variant
    Source("bench_train_stats_before_h200.json", _TRAIN_CMD),
    Source("bench_train_stats_h200.json", _TRAIN_CMD),
    Source("bench_train_stats2_before_h200.json", _TRAIN_CMD),
    Source("bench_train_stats2_h200.json", _TRAIN_CMD),
    Source("bench_train_bwd_heads_before_h200.json", _TRAIN_CMD),
    Source("bench_train_bwd_heads_h200.json", _TRAIN_CMD),
    Source("bench_train_xblocks_before_h200.json", _TRAIN_CMD),
    Source("bench_train_xblocks_h200.json", _TRAIN_CMD),
]
HEADS_TRAIN = Source("bench_train_heads_kernel_h200.json", "python experiments/bench_train.py "
                     "--cases 2,3,6,7")
HEADS_PROFILES = [
    ("c4795e9", Source("profile_phases_a2c_bf16_tail_h200.json", _PROFILE_CMD)),
    ("heads in the kernel", Source("profile_phases_a2c_bf16_stats_h200.json", _PROFILE_CMD)),
    ("masked backward", Source("profile_phases_a2c_bf16_stats2_h200.json", _PROFILE_CMD)),
]
_LEARN_CMD = "python experiments/learn_compare.py"
HEADS_LEARN = [  # (config, file, how to read the earlier figures from EQUIV)
    ("tag_2000_envs", Source("learn_compare_stats_h200/learn_compare.json", _LEARN_CMD),
     lambda eq: [(f"{c}", eq["commits"][c]["summary"]) for c in ("9d7bd31", "6b37f99")]),
    ("tag_100_agents", Source("learn_compare_100_stats_h200/learn_compare.json", _LEARN_CMD),
     lambda eq: [(v, eq["tag_100_agents"]["variants"][v]["tags"])
                 for v in ("kernels", "xla_layers")]),
]


HEADS_PYTEST = [(Source("pytest_heads_h200.log", "python -m pytest (the part's header)",
                       device="NVIDIA H200", part=part), what) for part, what in [
    ("heads_kernel", "`tests/test_mlp_kernel.py` on the Triton kernels (f540ac0)"),
    ("train_gpu", "the fused kernels' same bits twice, deterministic training (f540ac0)"),
    ("bwd_variant", "the model's actions form, `heads_grad_in_kernel.patch` (0858eba)"),
    ("xblocks", "the model's actions form and Tag's layers, column blocks (9a62441)"),
    ("dense_before", "`test_mlp_matches_plain_dense_layers` on the GPU, the code before"),
]]


def _heads_learn_rows(root: Path) -> list[list[str]]:
    rows, eq = [], _read_json(root, EQUIV)
    for config, src, earlier in HEADS_LEARN:
        before = ", ".join(f"{m['mean']:.1f} ± {m['ci95']:.1f} ({label})"
                           for label, m in earlier(eq))
        data = _read_json(root, src)
        (name, s), = data["summary"].items()
        runners = data.get("runner_return", {}).get(name)
        if "policies.runner.train=false" in data["overrides"]:
            runners = None  # random runners that do not train
        rows.append([f"`{config}`", str(s["n"]), f"{s['mean']:.1f} ± {s['ci95']:.1f}",
                     "—" if runners is None else f"{runners['mean']:.2f} ± {runners['ci95']:.2f}",
                     f"{data['random_tags_per_episode']:.1f}", before])
    return rows


def section_heads_kernel(root: Path) -> tuple[list[str], list[Source]]:
    now = _read_json(root, HEADS_PROFILES[1][1])
    head = TRAIN_BOTH_HEAD
    learn = [s for _, s, _ in HEADS_LEARN]
    lines = [
        "### The heads' statistics in the forward kernel",
        "",
        f"Before and after, each pair run back to back in one call, each file in its own "
        f"process, {on(root, *HEADS_VARIANTS)} (what each is: the file's note); env-steps/s "
        "(agent-steps/s in brackets), ms per update, compile in seconds:",
        "",
        *table(["file", "variant", "case", "matmuls", "env-steps/s", "ms / update",
                "compile s"], _tail_variant_rows(root, HEADS_VARIANTS)),
        *sources_block(root, HEADS_VARIANTS),
        f"The shipped trainer, both env backends in one process, {on(root, HEADS_TRAIN)}; "
        f"env-steps/s {AGENT_STEPS}:",
        "",
        *table(head, _train_rows(_read_json(root, HEADS_TRAIN)["results"], ("cuda", "jax"))),
        *sources_block(root, [HEADS_TRAIN]),
        "Phase profile of the A2C bf16 update at 2,000 × 110 (command buffers off), ms per "
        f"update and the phase's floor as above, {on(root, *(s for _, s in HEADS_PROFILES))}:",
        "",
        *table(["phase", *(f"{h} ({label})" for label, _ in HEADS_PROFILES
                           for h in ("ms", "floor ms"))], _tail_profile_rows(root, HEADS_PROFILES)),
        "",
        f"The largest learner kernels now ({HEADS_PROFILES[1][0]}): kernel, phase, ms per update, "
        "GB its HLO instruction moves, ms at the copy bandwidth:",
        "",
        *_learner_kernels(now, 10),
        *sources_block(root, [s for _, s in HEADS_PROFILES[1:]]),
        f"The same learning, 4 seeds each, {on(root, *learn)}: tags per episode at the end "
        "(95% interval over seeds), the runners' return where they train, random taggers' "
        f"level, and the earlier measurements of the same command ({on(root, EQUIV)}):",
        "",
        *table(["config", "seeds", "tags per episode", "runners' return", "random",
                "before"], _heads_learn_rows(root)),
        *sources_block(root, learn),
    ]
    tail, cited = _curves_and_tests(root, learn, HEADS_PYTEST)
    return lines + tail, [*HEADS_VARIANTS, HEADS_TRAIN, *(s for _, s in HEADS_PROFILES[1:]),
                          *learn, *cited]


def _curves_and_tests(root: Path, learn: list[Source], pytest: list[tuple[Source, str]]
                      ) -> tuple[list[str], list[Source]]:
    """A change's learning curves (each learn_compare file's CSV) and its GPU
    test runs: (lines, the sources they cite)."""
    curves = [Source(s.path.replace(".json", ".csv"), s.makes, device="NVIDIA H200")
              for s in learn]
    lines = [f"Their curves (tags per episode per update, each seed): "
             f"{', '.join(f'`{RESULTS / c.path}`' for c in curves)}.", "",
             "GPU test runs holding the change's tests, the latest of each file (its header "
             "names its command and commit):",
             "", *table(["tests", "result", "file"],
                        [[what, _pytest_counts(_text(root, src)), f"`{src.path}` (`{src.part}`)"]
                         for src, what in pytest]), ""]
    return lines, [*curves, *(s for s, _ in pytest)]


MOSAIC_FWD_BENCH = Source("bench_mosaic_mlp_tag_h200.json",
                          "python experiments/bench_mosaic_mlp.py --shapes 80x256 --actions 42")
MOSAIC_FWD_VARIANTS = [  # run back to back in one call: before (Triton), then Mosaic GPU
    Source("bench_train_mosaic_fwd_before_h200.json", _TRAIN_CMD),
    Source("bench_train_mosaic_fwd_h200.json", _TRAIN_CMD),
]
MOSAIC_FWD_TRAIN = Source("bench_train_mosaic_table_h200.json",
                          "python experiments/bench_train.py --cases 2,3,6,7")
MOSAIC_FWD_PROFILES = [
    ("heads in the kernel", Source("profile_phases_a2c_bf16_stats_h200.json", _PROFILE_CMD)),
    ("Mosaic GPU rollout forward", Source("profile_phases_a2c_bf16_mosaic_h200.json",
                                          _PROFILE_CMD)),
]
MOSAIC_FWD_LEARN = [  # (config, this change's file, the file before it)
    ("tag_2000_envs", Source("learn_compare_mosaic_h200/learn_compare.json", _LEARN_CMD),
     HEADS_LEARN[0][1]),
    ("tag_100_agents", Source("learn_compare_100_mosaic_h200/learn_compare.json", _LEARN_CMD),
     HEADS_LEARN[1][1]),
]
MOSAIC_FWD_PYTEST = [  # the whole GPU test run's parts that hold this change's tests
    (Source("pytest_gpu_h200.log", "bash experiments/tools/gpu_tests.sh tests",
            device="NVIDIA H200", part="group8"),
     "`tests/test_mlp_mosaic.py` on the GPU (against Triton and plain layers, vmap, the same "
     "bits), with every other file's GPU tests"),
    (Source("pytest_gpu_h200.log", "bash experiments/tools/gpu_tests.sh tests",
            device="NVIDIA H200", part="group6"),
     "the trainer's GPU tests: the fused kernels' same bits twice (the taggers on the Mosaic "
     "forward), deterministic training"),
]
MOSAIC_SANITIZE = Source("mosaic_sanitize_h200.log", "bash experiments/tools/gpu_tests.sh mosaic",
                         device="NVIDIA H200")
_MOSAIC_FWD_SIDES = [("pallas", "Triton (shipped before)"), ("mgpu_1wg_out16", "1 WG, 2 stages, "
                     "16-col stores (shipped)"), ("mgpu_mlp", "2 WGs, 1 stage, 16-col stores"),
                     ("mgpu_1wg", "1 WG, 1 stage, whole stores")]


def _mosaic_fwd_kernel_rows(root: Path) -> list[list[str]]:
    rows = []
    for r in _read_json(root, MOSAIC_FWD_BENCH)["results"]:
        s = r["sides"]
        base = s["pallas"]["us"]
        rows.append([f"{r['rows']:,}", f"{s['xla']['us']:.1f}"] + [
            f"{s[n]['us']:.1f} ({ratio(base / s[n]['us'])}, {100 * s[n]['peak_fraction']:.0f}%)"
            for n, _ in _MOSAIC_FWD_SIDES])
    return rows


def _learn_row(root: Path, config: str, src: Source) -> list[str]:
    data = _read_json(root, src)
    (name, s), = data["summary"].items()
    runners = data.get("runner_return", {}).get(name)
    return [f"`{config}`", f"`{src.path}`", f"{s['mean']:.1f} ± {s['ci95']:.1f}",
            "—" if not runners or "policies.runner.train=false" in data["overrides"]
            else f"{runners['mean']:.2f} ± {runners['ci95']:.2f}",
            f"{data['random_tags_per_episode']:.1f}"]


def section_mosaic_forward(root: Path) -> tuple[list[str], list[Source]]:
    learn = [s for _, s, _ in MOSAIC_FWD_LEARN]
    profiles = [s for _, s in MOSAIC_FWD_PROFILES]
    lines = [
        "### The rollout's forward on Mosaic GPU",
        "",
        "Tag's model (71 features padded to 80, shared torso 256-256 ReLU, 42 logits and a "
        "value) at a rollout step's rows (200,000 runners, 20,000 taggers) and a learner "
        "minibatch's (1,000,000), one forward without saved activations: XLA's dot chain, "
        "the shipped Triton kernel and `bench_mosaic_mlp.py`'s persistent Mosaic GPU kernel "
        "under three ways of fitting 192 KB of resident weights into shared memory; GPU "
        "kernel time in µs, speed against the Triton kernel and the fraction of the dense "
        f"bf16 peak in brackets, every side within bf16 tolerance of a float32 reference, "
        f"{on(root, MOSAIC_FWD_BENCH)}:",
        "",
        *table(["rows", "XLA", *(label for _, label in _MOSAIC_FWD_SIDES)],
               _mosaic_fwd_kernel_rows(root)),
        *sources_block(root, [MOSAIC_FWD_BENCH]),
        f"The trainer before and after, back to back in one call, each in its own process, "
        f"{on(root, *MOSAIC_FWD_VARIANTS)} (what each is: the file's note); env-steps/s "
        "(agent-steps/s in brackets), ms per update, compile in seconds:",
        "",
        *table(["file", "variant", "case", "matmuls", "env-steps/s", "ms / update",
                "compile s"], _tail_variant_rows(root, MOSAIC_FWD_VARIANTS)),
        *sources_block(root, MOSAIC_FWD_VARIANTS),
        f"The shipped trainer, both env backends in one process, {on(root, MOSAIC_FWD_TRAIN)}; "
        f"env-steps/s {AGENT_STEPS} (the MFU of the bf16 rows recounted after the run: the "
        "file's note):",
        "",
        *table(TRAIN_BOTH_HEAD, _train_rows(_read_json(root, MOSAIC_FWD_TRAIN)["results"],
                                            ("cuda", "jax"))),
        *sources_block(root, [MOSAIC_FWD_TRAIN]),
        "Phase profile of the A2C bf16 update at 2,000 × 110 (command buffers off), ms per "
        f"update and the phase's floor as above, {on(root, *profiles)}:",
        "",
        *table(["phase", *(f"{h} ({label})" for label, _ in MOSAIC_FWD_PROFILES
                           for h in ("ms", "floor ms"))],
               _tail_profile_rows(root, MOSAIC_FWD_PROFILES)),
        *sources_block(root, profiles[1:]),
        f"The same learning, 4 seeds each, this change's run and the one before it, "
        f"{on(root, *learn)}: tags per episode at the end (95% interval over seeds), the "
        "runners' return where they train, random taggers' level:",
        "",
        *table(["config", "file", "tags per episode", "runners' return", "random"],
               [_learn_row(root, c, s) for c, now, before in MOSAIC_FWD_LEARN
                for s in (before, now)]),
        *sources_block(root, learn),
    ]
    tail, cited = _curves_and_tests(root, learn, MOSAIC_FWD_PYTEST)
    return lines + tail + _mosaic_sanitize_lines(root), [
        MOSAIC_FWD_BENCH, *MOSAIC_FWD_VARIANTS, MOSAIC_FWD_TRAIN, *profiles[1:], *learn, *cited,
        MOSAIC_SANITIZE]


def _sanitize_rows(root: Path, src: Source, tools: tuple[str, ...] = (
        "memcheck", "racecheck", "synccheck", "initcheck")) -> list[list[str]]:
    """A `gpu_tests.sh mosaic` or `ppo` log: a row per tool (cases, summary,
    reports in a kernel); where a tool ran once per case, its summaries in turn."""
    rows = []
    for tool in tools:
        part = _text(root, Source(src.path, src.makes, part=tool))
        cases = len(re.findall(r"^case \d+ .*\bok\b", part, re.M))
        summaries = [m for m in re.findall(r"SUMMARY: (.*)", part) if "not printed" not in m]
        rc = re.search(r"^rc (\d+)", part, re.M)
        in_kernel = sum(int(n) for n in re.findall(r"^in a kernel: (\d+)", part, re.M))
        rows.append([tool, str(cases), "; ".join(summaries) if summaries else
                     f"none: the tool ended in a crash (rc {rc.group(1) if rc else '?'})",
                     str(in_kernel)])
    return rows


def _mosaic_sanitize_lines(root: Path) -> list[str]:
    """compute-sanitizer over the Mosaic GPU forward: a row per tool."""
    rows = _sanitize_rows(root, MOSAIC_SANITIZE)
    return [f"compute-sanitizer over the kernel (`experiments/tools/mosaic_sanitize.py`: four "
            f"models, uneven rows, each output checked against the Triton forward), "
            f"{on(root, MOSAIC_SANITIZE)}; initcheck's reports are at the host's copies of "
            "the outputs (XLA's command buffers), whose values the script checked: the tool "
            "does not see the kernel's TMA stores (docs/decisions.md):", "",
            *table(["tool", "cases checked", "summary", "reports in a kernel"], rows),
            *sources_block(root, [MOSAIC_SANITIZE])]


MOSAIC_LEARNER_FWD = [  # (file, what its run asked)
    (Source("bench_mosaic_learner_fwd_h200.json",
            "python experiments/bench_mosaic_learner_fwd.py"), "parts"),
    (Source("bench_mosaic_learner_fwd_store_h200.json",
            "python experiments/bench_mosaic_learner_fwd.py"), "h's stores"),
    (Source("bench_mosaic_learner_fwd_wg2_h200.json",
            "python experiments/bench_mosaic_learner_fwd.py"), "two warpgroups"),
    (Source("bench_mosaic_learner_fwd_tma2_h200.json",
            "python experiments/bench_mosaic_learner_fwd.py"), "one block in flight"),
]
_LEARNER_FWD_WHAT = {
    "mosaic": "whole: h stored from registers, statistics in registers (2 blocks in flight)",
    "no_h": "without h's stores", "no_stats": "without the statistics",
    "layers_only": "neither (the layers and the slab)",
    "fast_stats": "statistics with one exp over the heads' columns",
    "fast_no_h": "the same, without h's stores",
    "h_overlap": "h stored while the next layer's wgmma runs",
    "h_tma": "h through a [64, 64] tile by TMA (1 block in flight)",
    "h_tma_overlap": "the same, while the next wgmma runs",
    "direct": "the slab from registers too", "wg2_direct": "two compute warpgroups, 1 block each",
    "wg2_direct_no_h": "the same without h's stores",
    "wg2_direct_overlap": "two warpgroups, h while the next wgmma runs",
    "h_s1": "h from registers, 1 block in flight", "no_h_s1": "1 block in flight, without h",
    "h_tma2": "h through two [64, 32] tiles, a copy in flight (1 block)",
    "h_tma2_overlap": "the same, while the next wgmma runs",
}


def _learner_fwd_rows(root: Path) -> list[list[str]]:
    rows = []
    for src, asked in MOSAIC_LEARNER_FWD:
        big, small = _read_json(root, src)["results"]
        for name in [k for k in big if isinstance(big[k], dict) and "us" in big[k]]:
            rows.append([f"`{src.path}` ({asked})", f"`{name}`",
                         "Triton forward (shipped)" if name == "triton"
                         else _LEARNER_FWD_WHAT[name],
                         f"{big[name]['us']:.1f} ({ratio(big['triton']['us'] / big[name]['us'])})",
                         f"{small[name]['us']:.1f}"])
    return rows


def section_mosaic_learner_forward(root: Path) -> tuple[list[str], list[Source]]:
    srcs = [s for s, _ in MOSAIC_LEARNER_FWD]
    first = _read_json(root, srcs[0])["results"]
    return [
        "### The learner's forward on Mosaic GPU (measured, not shipped)",
        "",
        "`mlp_kernel.fused_head_stats`'s forward at Tag's shape as one persistent Mosaic GPU "
        "kernel (`experiments/bench_mosaic_learner_fwd.py`: the rollout kernel's resident "
        "weights, plus each hidden layer's activation h saved, bf16, and each head's "
        "log-softmax, entropy and the actions' log-probability) against the shipped Triton "
        f"forward, and the kernel without one of its parts, {on(root, *srcs)}; GPU kernel "
        f"µs per call at {first[0]['rows']:,} rows (speed against the same run's Triton in "
        f"brackets) and at {first[1]['rows']:,}; rows rounded to whole 128-row blocks from "
        "the second file on; every variant that computes all outputs within bf16 "
        "tolerance of Triton's (each file's `errors`):",
        "",
        *table(["file (what it asked)", "variant", "what", "µs, 1M rows", "µs, 100K rows"],
               _learner_fwd_rows(root)),
        *sources_block(root, srcs),
    ], srcs


PPO_GRAD = [Source("bench_mosaic_ppo_grad_h200.json",
                   "python experiments/bench_mosaic_ppo_grad.py"),
            Source("bench_mosaic_ppo_grad_kernels_h200.json",
                   "python experiments/bench_mosaic_ppo_grad.py --sides xla,mgpu,mgpu_kernels")]
# (both measured the bench's own copy of the kernels, before they moved to
# jaxwarp/train/ppo_mosaic.py)
PPO_GRAD_TTR = [  # now (two draws of seeds); bf16 against float32 (XLA's layers); the kernels
    # mended; first shipped; patch, before
    Source("time_to_return_permutation_h200.json", "python experiments/bench_time_to_return.py"),
    Source("time_to_return_permutation_seed10_h200.json",
           "python experiments/bench_time_to_return.py"),
    Source("time_to_return_permutation_seed20_h200.json",
           "python experiments/bench_time_to_return.py"),
    Source("time_to_return_permutation_seed30_h200.json",
           "python experiments/bench_time_to_return.py"),
    Source("time_to_return_cb_default_h200.json", "python experiments/bench_time_to_return.py"),
    Source("time_to_return_cb_while_h200.json", "python experiments/bench_time_to_return.py"),
    Source("time_to_return_bf16_h200.json", "python experiments/bench_time_to_return.py"),
    Source("time_to_return_ppo_mosaic_h200.json", "python experiments/bench_time_to_return.py"),
    Source("time_to_return_ppo_mosaic_first_h200.json",
           "python experiments/bench_time_to_return.py"),
    Source("time_to_return_ppo_kernel_h200.json", "python experiments/bench_time_to_return.py"),
    Source("time_to_return_ppo_kernel_before_h200.json",
           "python experiments/bench_time_to_return.py"),
]
PPO_PYTEST = Source("pytest_ppo_mosaic_h200.log", "python -m pytest tests/test_ppo_mosaic.py",
                    device="NVIDIA H200")
PPO_PARTS = [Source("ppo_mosaic_parts_h200.json", "python experiments/tools/ppo_mosaic_parts.py"),
             Source("ppo_mosaic_parts_regs_h200.json",
                    "python experiments/tools/ppo_mosaic_parts.py")]
PPO_SANITIZE = Source("ppo_mosaic_sanitize_h200.log", "bash experiments/tools/gpu_tests.sh ppo",
                      device="NVIDIA H200")
PPO_SANITIZE_MENDED = Source("ppo_mosaic_sanitize_mended_h200.log",
                             "bash experiments/tools/gpu_tests.sh ppo", device="NVIDIA H200")
PPO_SANITIZE_CASES = Source(
    "ppo_mosaic_sanitize_cases_h200.log", "compute-sanitizer --tool TOOL --kernel-name "
    "kns=ppo_tower python experiments/tools/ppo_mosaic_sanitize.py CASE", device="NVIDIA H200")
_PPO_PARTS_WHAT = {
    "whole": "the kernel as the file's commit had it", "no_stats": "without the loss's terms",
    "no_loss": "without the loss's gradient (dy = y)",
    "no_weight_grads": "without the six gradient wgmmas",
    "no_backward": "the forward and dy's store only", "forward_only": "the forward only",
    "pipeline_only": "the loads, weights in, partials out",
    "no_bias_grads": "without the three bias-gradient wgmmas",
    "no_db1_wgmma": "without db1's bias-gradient wgmma",
    "h_early": "h1, h2 stored as computed, derivatives from their bf16 copies (now shipped)",
    "h_late": "h1, h2 held in float32 through the loss (the first kernels' order)"}


def _ppo_parts_lines(root: Path) -> list[str]:
    rows = []
    for src in PPO_PARTS:
        res = _read_json(root, src)["results"]
        for name, r in res.items():
            base = name.split("@")[0]
            what = _PPO_PARTS_WHAT[base] + (f", {name.split('@')[1]} rows a seed" if "@" in name
                                            else "")
            rows.append([f"`{src.path}`", f"`{name}`", what, f"{r['us']:.1f}",
                         ratio(r["us"] / res["whole"]["us"])])
    return ["", "Where the actor kernel's time goes (`experiments/tools/ppo_mosaic_parts.py`: "
            "CartPole's GPU size, ten seeds × 16,384 rows, GPU kernel µs a call; variants with "
            f"parts of the block body taken out, timings only), {on(root, *PPO_PARTS)}:", "",
            *table(["file", "variant", "what", "µs", "of whole"], rows),
            *sources_block(root, PPO_PARTS), "",
            "compute-sanitizer over the kernels (`experiments/tools/ppo_mosaic_sanitize.py`: two "
            "cases, uneven rows and members folded into one launch, each result checked against "
            "XLA's bf16 autodiff on the CPU; the kernels of its commit), "
            f"{on(root, PPO_SANITIZE)}; initcheck's reports are host accesses, none in a kernel (as the forward's above):",
            "", *table(["tool", "cases checked", "summary", "reports in a kernel"],
                       _sanitize_rows(root, PPO_SANITIZE)),
            *sources_block(root, [PPO_SANITIZE]), "",
            "The same over the kernels with their registers mended (h1 and h2 stored as they "
            f"are computed), {on(root, PPO_SANITIZE_MENDED)}: memcheck and racecheck finished "
            "clean; synccheck and initcheck ended in a segmentation fault, twice (the log's "
            "last line), so that run says nothing of them:", "",
            *table(["tool", "cases checked", "summary", "reports in a kernel"],
                   _sanitize_rows(root, PPO_SANITIZE_MENDED)),
            *sources_block(root, [PPO_SANITIZE_MENDED]), "",
            "synccheck and initcheck again, one process per case (the same kernels), "
            f"{on(root, PPO_SANITIZE_CASES)}: each finished; synccheck reports nothing, and "
            "initcheck's printed reports (the first 100 of each run) are host accesses, none in "
            "a kernel:", "",
            *table(["tool", "cases checked", "summary (a case each)",
                    "printed reports in a kernel"],
                   _sanitize_rows(root, PPO_SANITIZE_CASES, ("synccheck", "initcheck"))),
            *sources_block(root, [PPO_SANITIZE_CASES])]
_PPO_GRAD_WHAT = {"xla": "XLA, float32 model (TF32 dots): what the trainer runs",
                  "xla_bf16": "XLA, bfloat16 matmuls",
                  "emulated": "the kernels' maths in jax (a side since removed: "
                              "tests/test_ppo_mosaic.py)",
                  "mgpu": "the two tower kernels and XLA's packing and sums around them",
                  "mgpu_kernels": "the two tower kernels alone"}


def _ppo_grad_rows(root: Path) -> list[list[str]]:
    rows = []
    for src in PPO_GRAD:
        for entry in _read_json(root, src)["results"]:
            sides = entry["sides"]
            for name, r in sides.items():
                rows.append([f"`{src.path}`", entry["case"], f"`{name}`", _PPO_GRAD_WHAT[name],
                             f"{r['us']:.0f} ({ratio(sides['xla']['us'] / r['us'])})",
                             f"{r['max_rel_err']:.3f}" if "max_rel_err" in r else "—"])
    return rows


def section_ppo_grad(root: Path) -> tuple[list[str], list[Source]]:
    cases = _read_json(root, PPO_GRAD[0])["config"]["cases"]
    sizes = "; ".join(f"{k} {c['seeds']} seeds × {c['rows']:,} rows, {c['obs_dim']} features, "
                      f"{c['actions']} actions" for k, c in cases.items())
    lines = [
        "### A PPO minibatch's loss and gradient as one kernel per tower",
        "",
        "`experiments/bench_mosaic_ppo_grad.py`: one minibatch step of the trainer before Optax "
        "(`jax.value_and_grad` of `policy_loss` of the 64-64 tanh two-tower `mlp`, PPO, "
        f"advantages normalised per minibatch) for every seed at once ({sizes}), "
        f"{on(root, *PPO_GRAD)}; GPU kernel µs per minibatch step (speed against the same "
        "run's `xla` in brackets) and the largest error of any output (loss, metrics, each "
        "gradient) over that output's largest value, against XLA at `precision=highest`:",
        "",
        *table(["file", "case", "side", "what", "µs (vs `xla`)", "largest error"],
               _ppo_grad_rows(root)),
        *sources_block(root, PPO_GRAD),
        "",
        "Whole training runs at GPU sizes, ten seeds (the cases' models in bfloat16 matmuls, "
        f"`cartpole_bf16` and `mpe_bf16`; float32 as shipped, `cartpole` and `mpe`), "
        f"{on(root, *PPO_GRAD_TTR)}; env-steps/s with agent-steps/s (env-steps × agents per "
        "env) in brackets where an env has more than one agent; what each file ran is its note:",
    ]
    for src in PPO_GRAD_TTR:
        lines += ["", f"`{src.path}` (env-steps/s; agent-steps/s in brackets for MPE's three "
                  f"agents): {_meta(root, src).get('note', '')}."]
        lines += _time_to_return_table(root, src)
    counts = _pytest_counts(_text(root, PPO_PYTEST))
    lines += ["", f"`tests/test_ppo_mosaic.py`'s GPU tests ({counts}; the file's first line "
              f"says how they ran): `{RESULTS / PPO_PYTEST.path}`."]
    lines += _ppo_parts_lines(root)
    return lines, (PPO_GRAD + PPO_GRAD_TTR + [PPO_PYTEST] + PPO_PARTS
                   + [PPO_SANITIZE, PPO_SANITIZE_MENDED, PPO_SANITIZE_CASES])


_PP = "python experiments/tools/peer_profile.py"
SHUFFLE_BENCH = Source("bench_shuffle_h200.json", "python experiments/bench_shuffle.py")
SHUFFLE_PROFILES = [Source("peer_profile_cartpole_bf16_mended_h200.json", _PP),
                    Source("peer_profile_cartpole_bf16_permutation_h200.json", _PP)]
BLOCK_DIAGONAL = [  # (without the patch, with it): one call each, the patch's run after
    (Source("peer_profile_cartpole_bf16_mended_h200.json", _PP),
     Source("peer_profile_cartpole_bf16_block_diagonal_h200.json", _PP)),
    (Source("peer_profile_cartpole_h200.json", _PP),
     Source("peer_profile_cartpole_block_diagonal_h200.json", _PP)),
    (Source("peer_profile_mpe_h200.json", _PP),
     Source("peer_profile_mpe_block_diagonal_h200.json", _PP))]
_SHUFFLE_SIDES = {"vmap": "`jax.vmap` of `jax.random.permutation` (the trainer before)",
                  "folded": "jax's permutations bit for bit by 1-D sorts, two a round",
                  "member_key": "one 1-D sort a round, the member's index in the keys' top "
                                "bits (`minibatches.permutation`'s way; it keeps 6 bits for "
                                "the index whatever the members)",
                  "shipped": "`minibatches.permutation` itself, vmapped"}


def _sorts_ms(run: dict) -> float:
    """The sorts' device ms per update among a profile's longest kernels."""
    return sum(k[1] for k in run["top_kernels"] if "sort" in k[0])


def _shuffle_lines(root: Path) -> list[str]:
    rows = [[str(r["members"]), f"{r['n']:,}", f"`{r['side']}`", _SHUFFLE_SIDES[r["side"]],
             f"{r['ms']:.2f}", "yes" if r["cub"] else "no",
             "—" if r["side"] == "vmap" else ("yes" if r["same"] else "no")]
            for r in _read_json(root, SHUFFLE_BENCH)["rows"]]
    prof = []
    for src in SHUFFLE_PROFILES:
        for name, r in _read_json(root, src)["runs"].items():
            prof.append([f"`{src.path}`", "the peer" if name == "peer" else f"`{name}`",
                         f"{r['device_ms_per_update']:.2f}", f"{_sorts_ms(r):.2f}"])
    return [
        "### The minibatches' permutation",
        "",
        "PPO's minibatches are a permutation of each member's T × envs steps an epoch. jax's "
        "`jax.random.permutation` is two rounds of stable sorts by random 32-bit keys at these "
        "sizes; under the trainer's `jax.vmap` over seeds each round is a batched sort that XLA "
        "does not give to CUB at ten rows of 65,536. `minibatches.permutation` sorts every "
        "member's steps in one 1-D sort a round by (member, 26 random bits); each member's "
        "permutation is the one it draws alone.",
        "",
        "`experiments/bench_shuffle.py`: an update's four epochs of PPO's steps permutation "
        f"for every member of a run, {on(root, SHUFFLE_BENCH)}; wall ms a call (median), "
        "whether XLA's program sorts with CUB's radix sort, and whether the permutations are "
        "the vmapped draw's:", "",
        *table(["members", "n", "side", "what", "ms", "CUB", "same as `vmap`"], rows),
        *sources_block(root, [SHUFFLE_BENCH]),
        "",
        "A CartPole bf16 update (ten seeds, GPU size) before and after, device ms per update "
        "and its sort kernels' ms among the profile's 15 longest kernels "
        "(`experiments/tools/peer_profile.py`, command buffers off), "
        f"{on(root, *SHUFFLE_PROFILES)}; `noshuf` draws no permutation (minibatches in order):",
        "", *table(["file", "run", "device ms / update", "sorts ms / update"], prof),
        *sources_block(root, SHUFFLE_PROFILES)]


def _block_diagonal_lines(root: Path) -> list[str]:
    rows = []
    for before, after in BLOCK_DIAGONAL:
        for src in (before, after):
            data = _read_json(root, src)
            for name, r in data["runs"].items():
                if name in ("peer", "noshuf"):
                    continue
                ph = r.get("phases", {})
                cell = [f"{ph[k][0]:.2f}" if k in ph else "—"
                        for k in ("rollout", "forward", "backward")]
                rows.append([f"`{src.path}`", data["case"], f"`{name}`",
                             f"{r['device_ms_per_update']:.2f}", *cell])
    srcs = [s for pair in BLOCK_DIAGONAL for s in pair]
    return [
        "",
        "`experiments/patches/two_towers_block_diagonal.patch` (a two-tower `mlp` on XLA's "
        "layers as one block-diagonal network), device ms per update by phase, ten seeds at "
        f"GPU size, command buffers off, {on(root, *srcs)}; each patched run in the same call "
        "as the run without it, after it (the bf16 case's forward and backward are the PPO "
        "kernels, not the patch's layers: — where the profile has no such phase):", "",
        *table(["file", "case", "run", "device ms / update", "rollout", "forward",
                "backward"], rows),
        *sources_block(root, srcs)]


def section_permutation(root: Path) -> tuple[list[str], list[Source]]:
    return ([*_shuffle_lines(root), *_block_diagonal_lines(root)],
            [SHUFFLE_BENCH, *SHUFFLE_PROFILES, *(s for pair in BLOCK_DIAGONAL for s in pair)])


TARGETS_TABLE = Source("bench_train_table_h200.json", "python experiments/bench_train.py")
TARGETS_PROFILE = Source("profile_phases_a2c_bf16_mosaic_h200.json", _PROFILE_CMD)
TARGETS_TTR = PPO_GRAD_TTR[:5]  # every time-to-return run since the minibatches' permutation
_TARGET_ROWS = [  # (config, matmul dtype, target env-steps/s, what)
    ("tag_warpdrive_default", "bfloat16", 2.5e6, "A2C bf16, 2,000 envs × 110 agents"),
    ("tag_warpdrive_default", "float32", 1.5e6, "A2C float32, 2,000 envs × 110 agents"),
    ("tag_2000_envs", "bfloat16", 1.5e6, "`tag_2000_envs` PPO (bf16, shared torso)")]
_LEARNER_PHASES = ("gae", "minibatch", "forward", "backward", "optimizer")


def _ttr_speedups(root: Path, case: str) -> list[float]:
    cases = [_read_json(root, src)["cases"] for src in TARGETS_TTR]
    return [c[case]["scales"]["gpu"]["jaxwarp_speedup"]["time_to_threshold"]
            for c in cases if case in c]


def section_targets(root: Path) -> tuple[list[str], list[Source]]:
    by = {(r["config"], _dtype(r), r["backend"]): r
          for r in _read_json(root, TARGETS_TABLE)["results"]}
    rows = []
    for config, dtype, target, what in _TARGET_ROWS:
        ours, peer = by[config, dtype, "cuda"], by[config, dtype, "jax"]
        rows.append([what, f"≥ {kilo_or_mega(target)} env-steps/s",
                     f"{rate(ours['env_steps_per_s'], ours['num_agents'], kilo_or_mega)} "
                     f"(pure-JAX env {kilo_or_mega(peer['env_steps_per_s'])}), "
                     f"MFU {ours['mfu']:.1%}", f"`{TARGETS_TABLE.path}`"])
    prof = _read_json(root, TARGETS_PROFILE)
    learner = sum(p["ms"] for p in prof["phases"] if p["phase"] in _LEARNER_PHASES)
    share = learner / prof["ms_per_update"]
    a2c_bf16 = by["tag_warpdrive_default", "bfloat16", "cuda"]
    rows.append(["the learner's share of the A2C bf16 update", "≤ 40%",
                 f"{share:.0%} ({learner:.1f} of {prof['ms_per_update']:.1f} ms of kernel time)",
                 f"`{TARGETS_PROFILE.path}`"])
    rows.append(["matmul MFU in the learner phase (A2C bf16)", "≥ 35%",
                 f"at most {a2c_bf16['mfu'] / share:.0%} (the whole update's MFU over the "
                 "learner's share: every matmul FLOP counted in the learner)",
                 f"`{TARGETS_TABLE.path}`, `{TARGETS_PROFILE.path}`"])
    for case, what in (("cartpole", "CartPole, float32 (as shipped)"),
                       ("cartpole_bf16", "CartPole, model in bf16 (the PPO kernels)"),
                       ("mpe", "MPE simple spread, float32 (as shipped)"),
                       ("mpe_bf16", "MPE simple spread, model in bf16 (the PPO kernels)")):
        x = sorted(_ttr_speedups(root, case))
        got = (f"{ratio(x[0])}–{ratio(x[-1])}, median {ratio(statistics.median(x))} over "
               f"{len(x)} runs" if len(x) > 1 else f"{ratio(x[0])} (one run)")
        rows.append([f"time to threshold at GPU size, ten seeds: {what}", "≥ 1.50× the peer",
                     got, "the time-to-return files above"])
    ttr = ", ".join(code(s.path) for s in TARGETS_TTR)
    return [
        "### The learner's targets: where they stand",
        "",
        "The targets (`docs/decisions.md`, \"Where issue 51 ends\") are for an H100; every "
        "figure here is on an H200 (the same tensor-core peak; NVIDIA gives 4.8 against 3.35 "
        f"TB/s of bandwidth). Tag's rows {on(root, TARGETS_TABLE)}, both env backends in one "
        f"process; the learner's share from the phase profile {on(root, TARGETS_PROFILE)}; the "
        f"times to threshold from every run since the minibatches' permutation ({ttr}):",
        "", *table(["target", "goal", "reached", "file"], rows),
        *sources_block(root, [TARGETS_TABLE, TARGETS_PROFILE])], [TARGETS_TABLE, TARGETS_PROFILE]


OBS_BUFFER = [  # run back to back in one call: before, then with the patch
    Source("bench_train_obs_buffer_before_h200.json", _TRAIN_CMD),
    Source("bench_train_obs_buffer_h200.json", _TRAIN_CMD),
]


def section_obs_buffer(root: Path) -> tuple[list[str], list[Source]]:
    rows = []
    for src in OBS_BUFFER:
        data = _read_json(root, src)
        for r in data["results"]:
            rows.append([f"`{src.path}`", _case(r["config"], r["overrides"]), _dtype(r),
                         rate(r["env_steps_per_s"], r["num_agents"], kilo_or_mega),
                         f"{r['seconds_per_update'] * 1e3:.1f}",
                         f"{r['rollout_seconds_per_update'] * 1e3:.1f}", f"{r['compile_s']:.1f}"])
    return [
        "### The rollout's observations in one buffer (measured, not shipped)",
        "",
        "`experiments/patches/rollout_obs_buffer.patch`: the step-by-step rollout keeps the "
        "observations acted on in one [T, ...] buffer instead of the scan's carry (which "
        "copies each step's new observations, f32[envs, agents, D], into the carry on the "
        "CPU's HLO), the last step after the scan. The trainer before and with the patch, "
        f"back to back in one call, each in its own process, {on(root, *OBS_BUFFER)} (each "
        "file's note says which); env-steps/s (agent-steps/s in brackets), ms per update, the "
        "rollout timed alone, compile in seconds:",
        "",
        *table(["file", "case", "matmuls", "env-steps/s", "ms / update", "rollout ms",
                "compile s"], rows),
        *sources_block(root, OBS_BUFFER),
    ], OBS_BUFFER


DUEL_LOG = Source("duel_h100/train.log",
                  "time jaxwarp train --config tag_duel_cpu --out runs/duel", device=H100)
DUEL_EVAL = Source("duel_h100/eval.json", "jaxwarp eval --run runs/duel", device=H100)
CARTPOLE_LOG = Source("train_ppo_h100.log", "jaxwarp train --config cartpole_ppo",
                      device=H100, part="train_cartpole_ppo_h100.log")
CARTPOLE_CSV = Source("train_ppo_h100_metrics.csv", "jaxwarp train --config cartpole_ppo",
                      device=H100, part="train_cartpole_ppo_h100_metrics.csv")
SPREAD_LOG = Source("train_ppo_h100.log", "jaxwarp train --config mpe_simple_spread_ppo",
                    device=H100, part="train_mpe_simple_spread_ppo_h100.log")
SPREAD_CSV = Source("train_ppo_h100_metrics.csv", "jaxwarp train --config mpe_simple_spread_ppo",
                    device=H100, part="train_mpe_simple_spread_ppo_h100_metrics.csv")
LEARN_TAG = Source("learn_tag_h100/learn_tag.json",
                   "python experiments/learn_tag.py --config tag_chase --minutes 5",
                   device=H100)
LEARN_TAG_CSV = Source("learn_tag_h100/learn_tag.csv",
                       "python experiments/learn_tag.py --config tag_chase --minutes 5",
                   device=H100)
LEARN_A2C = Source("learn_compare_a2c_h100/learn_compare.json",
                   "python experiments/learn_compare.py", device=H100)
LEARN_PPO = Source("learn_compare_ppo_h100/learn_compare.json",
                   "python experiments/learn_compare.py", device=H100)


def _text(root: Path, src: Source) -> str:
    """A log's text; of a merged log, the part's (between its header and the next)."""
    text = (root / RESULTS / src.path).read_text()
    if not src.part:
        return text
    m = re.search(rf"^==> {re.escape(src.part)} <==\n\$ [^\n]*\n(.*?)(?=^==> |\Z)", text,
                  re.M | re.S)
    if m is None:
        raise ValueError(f"{RESULTS / src.path} has no part {src.part!r}")
    return m.group(1)


def _csv(root: Path, src: Source) -> list[dict]:
    with open(root / RESULTS / src.path, newline="") as f:
        rows = list(csv.DictReader(f))
    return [r for r in rows if r["file"] == src.part] if src.part else rows


def _process_wall_s(log: str) -> float:
    m = re.search(r"^real\s+(\d+)m([\d.]+)s", log, re.M)
    if m:
        return int(m.group(1)) * 60 + float(m.group(2))
    return float(re.search(r"wall (\d+(?:\.\d+)?) s", log).group(1))


def _run_line(log: str) -> dict:
    """The CLI's summary line: "... 377,649 env-steps/s (compile 18.1 s) ..." or, since
    jaxwarp.units, "... 378K env-steps/s (2.64M agent-steps/s) on DEVICE (compile ...)"."""
    m = re.search(r"(\d+)/\d+ updates, ([\d,]+) env-steps per seed.*?; ([\d,.]+)([KMG]?) "
                  r"env-steps/s (?:\([^()]* agent-steps/s\) )?(?:on .*? )?\(compile ([\d.]+) s\)",
                  log)
    scale = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[m.group(4)]
    return dict(updates=int(m.group(1)), env_steps=int(m.group(2).replace(",", "")),
                env_steps_per_s=float(m.group(3).replace(",", "")) * scale,
                compile_s=float(m.group(5)))


def section_time_to_policy(root: Path) -> tuple[list[str], list[Source]]:
    rows = []
    duel_log = _text(root, DUEL_LOG)
    duel = _run_line(duel_log)
    gain = _read_json(root, DUEL_EVAL)["gain"]
    episodes = _read_json(root, DUEL_EVAL)["episodes"]
    rows.append([
        "`jaxwarp train --config tag_duel_cpu` (2 taggers vs 5 runners, both trained, PPO)",
        f"{duel['env_steps']:,}", f"{_process_wall_s(duel_log):.0f} s (compile "
        f"{duel['compile_s']:.0f} s)",
        rate(duel["env_steps_per_s"], agents_of("tag_duel_cpu"), kilo_or_mega),
        f"return over random, each against the other group playing at random "
        f"({episodes} episodes, 95% interval): taggers +{gain['tagger']['delta']:.1f} ± "
        f"{gain['tagger']['ci95']:.1f}, runners +{gain['runner']['delta']:.1f} ± "
        f"{gain['runner']['ci95']:.1f}"])
    log, metrics = _text(root, CARTPOLE_LOG), _csv(root, CARTPOLE_CSV)
    run = _run_line(log)
    first = next(r for r in metrics if float(r["agent/episode_return"]) >= 500)
    last50 = statistics.mean(float(r["agent/episode_return"]) for r in metrics[-50:])
    rows.append([
        "`jaxwarp train --config cartpole_ppo` (32 envs, PPO)", f"{run['env_steps']:,}",
        f"{_process_wall_s(log):.0f} s (compile {run['compile_s']:.0f} s)",
        rate(run["env_steps_per_s"], agents_of("cartpole_ppo"), kilo_or_mega),
        f"return 500 (the maximum) first at {int(float(first['env_steps'])):,} env-steps, "
        f"{float(first['wall_s']):.1f} s into the run; mean of the last 50 updates {last50:.0f}"])
    log, metrics = _text(root, SPREAD_LOG), _csv(root, SPREAD_CSV)
    run = _run_line(log)
    rows.append([
        "`jaxwarp train --config mpe_simple_spread_ppo` (PPO)", f"{run['env_steps']:,}",
        f"{_process_wall_s(log):.0f} s (compile {run['compile_s']:.0f} s)",
        rate(run["env_steps_per_s"], agents_of("mpe_simple_spread_ppo"), kilo_or_mega),
        f"return {float(metrics[0]['agent/episode_return']):.1f} at the first update, "
        f"{float(metrics[-1]['agent/episode_return']):.1f} at the last"])
    learn = _read_json(root, LEARN_TAG)
    curve = _csv(root, LEARN_TAG_CSV)
    t = learn["trained"]
    rows.append([
        "`experiments/learn_tag.py --config tag_chase --minutes 5` (10 taggers vs 100 random "
        "runners, A2C, 100 envs)", f"{learn['summary']['env_steps_per_seed']:,}",
        f"{float(curve[-1]['wall_s']):.0f} s (compile {learn['summary']['compile_s']:.0f} s)",
        rate(learn["summary"]["env_steps_per_s"], learn["summary"].get("agents_per_env")
             or agents_of(learn["config"], learn["overrides"]), kilo_or_mega),
        f"random taggers {learn['random']['tags_per_episode']:.1f} tags per episode; trained "
        f"pass 3× that {t['first_wall_s_at_3x_random']:.0f} s into the run (compile included), "
        f"end at {t['final_tags_per_episode']:.1f} ({ratio(t['ratio_to_random'])})"])
    lines = [
        "## Time to a trained policy",
        "",
        f"One seed each, {on(root, DUEL_LOG, CARTPOLE_LOG, SPREAD_LOG, LEARN_TAG)}; wall clock "
        "of the whole process where the log has it (start-up and compile included), else of "
        f"the run; env-steps/s {AGENT_STEPS}:",
        "",
        *table(["run", "env-steps", "wall clock", "env-steps/s", "result"], rows),
        *sources_block(root, [DUEL_LOG, DUEL_EVAL, CARTPOLE_LOG, CARTPOLE_CSV, SPREAD_LOG,
                              SPREAD_CSV, LEARN_TAG, LEARN_TAG_CSV]),
    ]
    crow = []
    for src in (LEARN_A2C, LEARN_PPO):
        d = _read_json(root, src)
        for name, v in d["variants"].items():
            crow.append([f"`{d['config']}` {' '.join(f'`{o}`' for o in d['overrides'])}",
                         f"`{name}`: {' '.join(f'`{o}`' for o in v['overrides']) or 'as shipped'}",
                         f"{d['env_steps']:,}",
                         rate(v["env_steps_per_s"], v.get("agents_per_env")
                              or agents_of(d["config"], [*d["overrides"], *v["overrides"]]),
                              kilo_or_mega),
                         f"{v['final_tags_per_episode']:.1f}",
                         f"{d['random_tags_per_episode']:.1f}", ratio(v["ratio_to_random"])])
    lines += [
        "### Do the speed options still learn?",
        "",
        "`experiments/learn_compare.py`: variants of one config trained for the same env-steps, "
        f"taggers chasing runners that move at random, one seed each, "
        f"{on(root, LEARN_A2C, LEARN_PPO)}; tags per episode at the end (moving mean over the "
        f"last 5% of updates) against random taggers; env-steps/s {AGENT_STEPS}:",
        "",
        *table(["config", "variant", "env-steps", "env-steps/s", "tags per episode",
                "random taggers", "trained / random"], crow),
    ]
    return lines + sources_block(root, [LEARN_A2C, LEARN_PPO]), [
        DUEL_LOG, DUEL_EVAL, CARTPOLE_LOG, CARTPOLE_CSV, SPREAD_LOG, SPREAD_CSV, LEARN_TAG,
        LEARN_TAG_CSV, LEARN_A2C, LEARN_PPO]


TAG_RUNS = [Source(f"tag_{n}_agents_h100/eval.json", f"jaxwarp train --config tag_{n}_agents")
            for n in (100, 1000)]


def _decimals(ci95: float) -> int:
    """Decimals that show a 95% interval to two significant digits."""
    return max(0, 1 - int(math.floor(math.log10(ci95)))) if ci95 > 0 else 1


def pm(mean: float, ci95: float, sign: str = "") -> str:
    """mean ± ci95, the interval to two significant digits and the mean to as many
    decimals (sign="+": the mean's sign always shown)."""
    d = _decimals(ci95)
    return f"{mean:{sign},.{d}f} ± {ci95:,.{d}f}"


def section_tag_runs(root: Path) -> tuple[list[str], list[Source]]:
    rows, grows = [], []
    for src in TAG_RUNS:
        d = _read_json(root, src)
        meta, summary, ev = d["meta"], d["summary"], d["eval"]
        config = shlex.split(meta["command"])[3]
        rows.append([f"`{config}`", f"{summary['env_steps_per_seed']:,}",
                     rate(summary["env_steps_per_s"],
                          summary.get("agents_per_env") or agents_of(config), kilo_or_mega),
                     f"{summary['compile_s']:.0f}",
                     f"{summary['run_s']:.0f}", f"{meta['wall_s_including_compile_and_eval']:.0f}"])
        for group, g in ev["gain"].items():
            # The group trained, the other at random; and both at random.
            trained, random = ev["matchups"][f"{group} trained"], ev["matchups"]["random"]
            grows.append([f"`{config}`", group,
                          pm(**trained[f"{group}/return"]), pm(**random[f"{group}/return"]),
                          pm(g["delta"], g["ci95"], sign="+"),
                          "yes" if g["beats_random"] else "no",
                          f"{pm(**trained['tags_per_episode'])} vs "
                          f"{pm(**random['tags_per_episode'])}"])
    episodes = {_read_json(root, s)["eval"]["episodes"] for s in TAG_RUNS}
    lines = [
        "## Many-agent Tag: trained against random",
        "",
        "`jaxwarp train --config tag_100_agents` and `tag_1000_agents` (both groups trained, "
        f"one seed, {devices(root, *TAG_RUNS)}), then `jaxwarp eval`: env-steps, env-steps/s "
        "(agent-steps/s in brackets) and compile and run seconds as the run reports them, and "
        "the wall clock of the whole command (start-up, compile, training, eval and GIF):",
        "",
        *table(["config", "env-steps", "env-steps/s", "compile s", "run s", "wall clock s"],
               rows),
        "",
        f"Each group's trained policy against the other group playing at random, and both "
        f"groups at random ({', '.join(map(str, sorted(episodes)))} episodes per matchup; "
        f"mean return per agent ± 95% interval; gain = trained − random, its own 95% interval); "
        f"tags per episode in the same two matchups:",
        "",
        *table(["config", "group", "trained", "random", "gain", "beats random",
                "tags per episode, trained vs random"], grows),
        *sources_block(root, TAG_RUNS),
    ]
    return lines, list(TAG_RUNS)


TIME_TO_RETURN = Source("time_to_return_h100.json",
                        "python experiments/bench_time_to_return.py --cases mpe,cartpole,tag "
                        "--scale both")
TIME_TO_RETURN_PAPER = Source("time_to_return_paper_h100.json",
                              "python experiments/bench_time_to_return.py --cases cartpole,mpe "
                              "--scale paper --seeds 10")


# The columns of every time-to-return table (`_time_to_return_rows`).
TTR_HEADER = ["case: peer", "envs × steps", "threshold", "to threshold", "jaxwarp ahead",
              "env-steps/s", "final return", "compile s"]


def _time_to_return_rows(data: dict) -> list[list[str]]:
    rows = []
    for case, c in data["cases"].items():
        for scale, sc in c["scales"].items():
            ours, peer = sc["runs"]["jaxwarp"], sc["runs"]["peer"]
            steps = ours["steps_per_update_per_env"]
            envs = ours["batch_env_steps"] // steps
            rows.append([
                f"`{case}`, {scale} sizes: {peer['label']}",
                f"{envs:,} × {steps}", f"{sc['threshold']:.1f}",
                " vs ".join(f"{r['to_threshold']['seconds']:.2f} s" for r in (ours, peer)),
                ratio(sc["jaxwarp_speedup"]["time_to_threshold"]),
                " vs ".join(rate(r["env_steps_per_s"], r.get("num_agents") or agents_of(
                    r.get("config", ""), r.get("overrides", [])), kilo_or_mega)
                    for r in (ours, peer)),
                " vs ".join(pm(r["final_return"]["mean"], r["final_return"]["ci95"])
                            for r in (ours, peer)),
                " vs ".join(f"{r['compile_s']:.0f}" for r in (ours, peer))])
    return rows


def _time_to_return_table(root: Path, source: Source) -> list[str]:
    """A time-to-return file's table, the file's notes on its thresholds, the
    commands of its runs and its source line."""
    data = _read_json(root, source)
    runs = [m["command"] for m in data.get("meta_runs", [data["meta"]])]
    return [
        "",
        *table(TTR_HEADER, _time_to_return_rows(data)),
        "",
        *(f"The file's note on `{case}` at {scale} sizes: {sc['threshold_note']}"
          for case, c in data["cases"].items()
          for scale, sc in c["scales"].items() if sc.get("threshold_note")),
        "",
        "The file holds the runs of " + " and ".join(code(r) for r in runs) + ".",
        *sources_block(root, [source]),
    ]


def section_time_to_return(root: Path) -> tuple[list[str], list[Source]]:
    meta = _meta(root, TIME_TO_RETURN)
    lines = [
        "## Time to a return: jaxwarp's trainer against peers",
        "",
        f"`experiments/bench_time_to_return.py`: the jaxwarp trainer (`cuda` backend) and a "
        f"peer trained on the same problem at the same hyperparameters, {meta['seeds']} seeds "
        f"in one program per trainer, at the peer's published sizes (paper) and at GPU-sized "
        f"batches (gpu). Time to threshold: training seconds (compile apart) until the "
        f"seed-mean return curve reaches the (case, scale)'s threshold ({meta['threshold']}, "
        f"frac {meta['threshold_frac']}); > 1× means jaxwarp is ahead. Final return: "
        f"{meta['final_return']}. Return: {meta['return']}. Each pair jaxwarp vs peer, "
        f"{on(root, TIME_TO_RETURN)}; both sides' env-steps/s measured here "
        f"{AGENT_STEPS}:",
        *_time_to_return_table(root, TIME_TO_RETURN),
        "",
        "The paper sizes again with PPO's minibatches of single steps (`minibatch_layout: "
        "auto`, the default since; the table above used env sequences), "
        f"{on(root, TIME_TO_RETURN_PAPER)}; env-steps/s {AGENT_STEPS}:",
        "",
        *table(TTR_HEADER,
               _time_to_return_rows(_read_json(root, TIME_TO_RETURN_PAPER))),
        *sources_block(root, [TIME_TO_RETURN_PAPER]),
        "",
        "Both sizes again with the fused rollout (the trainer's rollout for these models on "
        "the `cuda` backend since: one kernel per rollout; next section), "
        f"{on(root, TIME_TO_RETURN_FUSED)}; env-steps/s {AGENT_STEPS}:",
        "",
        *table(TTR_HEADER,
               _time_to_return_rows(_read_json(root, TIME_TO_RETURN_FUSED))),
        *sources_block(root, [TIME_TO_RETURN_FUSED]),
    ]
    lines += [
        "",
        "The GPU sizes and the Tag duel again on an H100 after the fused rollout's block cap "
        f"(previous section), {on(root, TIME_TO_RETURN_FUSED_H100)}; env-steps/s {AGENT_STEPS}:",
        "",
        *table(TTR_HEADER,
               _time_to_return_rows(_read_json(root, TIME_TO_RETURN_FUSED_H100))),
        *sources_block(root, [TIME_TO_RETURN_FUSED_H100]),
        "",
        "With the fused rollout's work limit (10 seeds of the Tag duel's GPU size fold into "
        "one launch of 143,360 agents: the step-by-step rollout now; the peers' sizes stay "
        f"fused), {on(root, TIME_TO_RETURN_WORK_RULE_H100)}; env-steps/s {AGENT_STEPS}:",
        "",
        *table(TTR_HEADER,
               _time_to_return_rows(_read_json(root, TIME_TO_RETURN_WORK_RULE_H100))),
        *sources_block(root, [TIME_TO_RETURN_WORK_RULE_H100]),
        "",
        "MPE's sample gap at GPU size, env or trainer: 10 seeds, 100 updates (1,024 envs × 32 "
        "steps; the learning rate anneals over the 100), updates to a return of −22.9 (the GPU "
        "runs' threshold) of the seed-mean curve and per seed, "
        f"{on(root, SAMPLE_GAP_CPU)} (env-steps do not depend on the device):",
        "",
        *table(["trainer", "env", "updates (seed-mean curve)", "updates per seed",
                "final return"], _sample_gap_rows(root)),
        *sources_block(root, [SAMPLE_GAP_CPU, PEER_ENV_SWAP_CPU]),
    ]
    return lines, [TIME_TO_RETURN, TIME_TO_RETURN_PAPER, TIME_TO_RETURN_FUSED,
                   TIME_TO_RETURN_FUSED_H100, TIME_TO_RETURN_WORK_RULE_H100, SAMPLE_GAP_CPU,
                   PEER_ENV_SWAP_CPU]


SAMPLE_GAP_CPU = Source("train_h100.json", "python experiments/bench_time_to_return.py --cases "
                        "mpe --scale gpu --seeds 10 --total-steps 3276800 --backend cpu "
                        "--threshold mpe=-22.9", part="sample_gap_mpe_gpu_cpu.json")
PEER_ENV_SWAP_CPU = Source("train_h100.json", "python experiments/tools/peer_env_swap.py "
                           "--scale gpu --total-steps 3276800 --seeds 10 --threshold -22.9 "
                           "--backend cpu --envs jaxwarp", part="peer_env_swap_cpu.json")


def _sample_gap_rows(root: Path) -> list[list[str]]:
    def pm(m: dict) -> str:
        return f"{m['mean']:.1f} ± {m['ci95']:.1f}"

    rows = []
    sc = _read_json(root, SAMPLE_GAP_CPU)["cases"]["mpe"]["scales"]["gpu"]
    for name, trainer, env in (("jaxwarp", "jaxwarp", "jaxwarp's (`cpu`)"),
                               ("peer", "IPPO peer", "JaxMARL's")):
        r = sc["runs"][name]
        per_update = r["run_s"] / r["num_updates"]
        secs = r["to_threshold"]["per_seed_seconds"]
        rows.append([trainer, env, str(r["to_threshold"]["updates"]),
                     pm({k: secs[k] / per_update for k in ("mean", "ci95")}),
                     pm(r["final_return"])])
    swap = _read_json(root, PEER_ENV_SWAP_CPU)["runs"]["jaxwarp"]
    rows.append(["IPPO peer", "jaxwarp's (`cpu`)", str(swap["updates_to_threshold"]),
                 pm(swap["per_seed_updates"]), pm(swap["final_return"])])
    return rows


TIME_TO_RETURN_FUSED = Source("time_to_return_fused_h200.json",
                              "python experiments/bench_time_to_return.py --cases CASE "
                              "--scale SCALE --seeds 10 (four runs merged)")
TIME_TO_RETURN_FUSED_H100 = Source("train_h100.json",
                                   "python experiments/bench_time_to_return.py --cases "
                                   "cartpole,mpe --scale gpu --seeds 10; the same with --cases "
                                   "tag --scale both", part="time_to_return_fused_h100.json")


TIME_TO_RETURN_WORK_RULE_H100 = Source(
    "train_h100.json", "python experiments/bench_time_to_return.py --cases tag --scale both "
    "--seeds 10; the same with --cases cartpole,mpe --scale paper",
    part="time_to_return_work_rule_h100.json")


FUSED_ROLLOUT = Source("fused_rollout_h200.json",
                       "python experiments/bench_fused_rollout.py")


FUSED_ROLLOUT_H100 = Source("train_h100.json",
                            "python experiments/bench_fused_rollout.py --repeats 2",
                            part="bench_fused_rollout_h100.json")
PEER_PROFILES = [
    (Source("train_h100.json", "python experiments/tools/peer_profile.py --case "
            "cartpole --scale gpu --variant default --variant step @step_by_step",
            part="peer_profile_cartpole_before_h100.json"), "CartPole, blocks of 78 envs"),
    (Source("train_h100.json", "python experiments/tools/peer_profile.py --case "
            "cartpole --scale gpu --variant default --variant step @step_by_step",
            part="peer_profile_cartpole_h100.json"), "CartPole, blocks of 16 agents"),
    (Source("train_h100.json", "python experiments/tools/peer_profile.py --case mpe "
            "--scale gpu --variant default --variant step @step_by_step",
            part="peer_profile_mpe_h100.json"), "MPE, blocks of 15 agents"),
]


FUSED_ROLLOUT_AGENT_MAJOR = Source("train_h100.json", "python experiments/bench_fused_rollout.py",
                                   part="bench_fused_rollout_agent_major_h200.json")
FUSED_GPU_TESTS = Source("train_h100.json",
                         "python3 -m pytest -m gpu tests/test_fused_rollout.py",
                         part="pytest_fused_rollout_h200.json")
TAG_PROFILES = [
    (Source("train_h100.json", "python experiments/tools/peer_profile.py --case tag --scale "
            f"{scale} --variant default --variant step @step_by_step",
            part=f"peer_profile_tag_{scale}_h200.json"), what)
    for scale, what in (("paper", "Tag duel, 10 × 64 envs"),
                        ("gpu", "Tag duel, 10 × 2,048 envs"))]


PEER_PHASES = Source("train_h100.json", "XLA_FLAGS=--xla_gpu_enable_command_buffer= "
                     "python experiments/tools/peer_profile.py --case cartpole --scale gpu "
                     "--variant default --variant step @step_by_step",
                     part="peer_profile_cartpole_before_nocb_h100.json")


def _peer_profile_rows(root: Path, profiles: list | None = None) -> list[list[str]]:
    rows = []
    for src, what in profiles or PEER_PROFILES:
        d = _read_json(root, src)
        for name in ("default", "step", "peer"):
            r = d["runs"][name]
            kernel = sum(ms for k, ms, _ in r["top_kernels"] if "rollout_kernel" in k)
            label = {"default": "jaxwarp, fused rollout", "step": "jaxwarp, step by step",
                     "peer": "the peer"}[name]
            rows.append([what if name == "default" else "", f"`{d['meta']['commit']}`", label,
                         f"{r['s_per_update'] * 1e3:.1f}", f"{r['device_ms_per_update']:.1f}",
                         f"{r['kernels_per_update']:.0f}", f"{kernel:.2f}" if kernel else "—"])
    return rows


def _fused_rows(data: dict) -> list[list[str]]:
    results = data["results"] + [r for run in data.get("more_runs", []) for r in run["results"]]
    by_case: dict[str, dict[str, dict]] = {}
    for r in results:
        by_case.setdefault(r["case"], {})[r["variant"]] = r
    rows = []
    for case, v in by_case.items():
        f, s = v["fused"], v["step_by_step"]
        rows.append([f"`{case}`", f"{f['num_envs']:,} × {f['num_steps']}",
                     " vs ".join(rate(r["env_steps_per_s"], r["num_agents"], kilo_or_mega)
                                 for r in (f, s)),
                     ratio(f["env_steps_per_s"] / s["env_steps_per_s"]),
                     " vs ".join(f"{r['rollout_seconds_per_update'] * 1e3:.2f}" for r in (f, s)),
                     ratio(s["rollout_seconds_per_update"] / f["rollout_seconds_per_update"])])
    return rows


FUSED_HEADER = ["case", "envs × steps", "update env-steps/s (fused vs scan)", "update",
                "rollout ms (fused vs scan)", "rollout"]

ENV_PARAMS_OPERAND = Source("env_params_operand_h200.json",
                            "python experiments/bench_fused_rollout.py --cases "
                            "tag_duel,mpe_gpu,cartpole_gpu at each commit")


def _params_operand_rows(data: dict) -> tuple[list[str], list[list[str]]]:
    """One row per kernel case, one column per commit: env-steps/s (Tag's kernel
    alone at its two WarpDrive sizes; the fused rollout's update and, in
    brackets, its rollout ms)."""
    commits = list(dict.fromkeys(r["meta"]["commit"] for r in data["runs"]))
    cells: dict[str, dict[str, str]] = {}
    for run in data["runs"]:
        for r in run["results"]:
            if "case" in r:
                if r["variant"] != "fused":
                    continue
                case = f"`{r['case']}` fused rollout"
                cell = rate(r["env_steps_per_s"], r["num_agents"], kilo_or_mega,
                            f"rollout {r['rollout_seconds_per_update'] * 1e3:.2f} ms")
            else:
                case = f"Tag kernel, {r['num_envs']:,} envs × {r['num_agents']:,} agents"
                cell = rate(r["env_steps_per_s"], r["num_agents"], kilo_or_mega)
            cells.setdefault(case, {})[run["meta"]["commit"]] = cell
    label = {r["meta"]["commit"]: r["label"] for r in data["runs"]}
    header = ["case"] + [f"`{c}`: {label[c]}" for c in commits]
    return header, [[case] + [v.get(c, "—") for c in commits] for case, v in cells.items()]


def section_fused_rollout(root: Path) -> tuple[list[str], list[Source]]:
    data = _read_json(root, FUSED_ROLLOUT)
    rows = _fused_rows(data)
    san = data["sanitizer"]
    lines = [
        "## The fused rollout",
        "",
        "`experiments/bench_fused_rollout.py`: the trainer's whole update and its rollout "
        "alone, with the fused rollout (one kernel per rollout: the MLP's forward pass, the "
        "draws and the env step of every step) and with the step-by-step scan, side by side "
        "in one process, at the time-to-return cases' settings and two Tag configs "
        f"(`tag_2000_envs` has a bfloat16 model and keeps the scan in both rows), "
        f"{on(root, FUSED_ROLLOUT)}; env-steps/s {AGENT_STEPS}:",
        "",
        *table(FUSED_HEADER, rows),
        "",
        f"compute-sanitizer over the fused kernel's layouts (`experiments/tools/"
        f"fused_sanitize.py`, commit {san['commit']}): memcheck `{san['memcheck']}`, racecheck "
        f"`{san['racecheck']}`.",
        *sources_block(root, [FUSED_ROLLOUT]),
        "",
        "What reading the env's Params from a buffer operand (env params as data) costs the "
        "kernels, each commit built and run in turn on one machine, "
        f"{on(root, ENV_PARAMS_OPERAND)}; env-steps/s of Tag's kernel alone and of the fused "
        f"rollout's whole update (with its rollout's ms an update) {AGENT_STEPS}:",
        "",
        *table(*_params_operand_rows(_read_json(root, ENV_PARAMS_OPERAND))),
        *sources_block(root, [ENV_PARAMS_OPERAND]),
        "",
        "The same after the block cap and the row tiles (at most 16 agents a block where envs "
        "are many; each thread a unit of 4 rows), one seed, "
        f"{on(root, FUSED_ROLLOUT_H100)}; env-steps/s {AGENT_STEPS}:",
        "",
        *table(FUSED_HEADER, _fused_rows(_read_json(root, FUSED_ROLLOUT_H100))),
        *sources_block(root, [FUSED_ROLLOUT_H100]),
        "",
        "One update at GPU sizes with 10 seeds vmapped (the time-to-return runs: 20,480 "
        "CartPoles, 10,240 MPEs per launch), `experiments/tools/peer_profile.py`: wall ms per "
        "update (command buffers on), device ms and kernels per update from a profiler "
        f"trace, and the fused rollout kernel's own ms, {on(root, PEER_PROFILES[0][0])}:",
        "",
        *table(["case", "commit", "trainer", "ms per update", "device ms", "kernels",
                "rollout kernel ms"], _peer_profile_rows(root)),
        "",
        "Where the rest goes (CartPole, blocks of 78 envs, command buffers off, device ms per "
        "update by the trainer's phases; `other` holds the fused rollout kernel): "
        + "; ".join(f"{'fused' if n == 'default' else 'step by step'}: " + ", ".join(
            f"{ph} {ms:.1f}" for ph, (ms, _) in sorted(r["phases"].items(), key=lambda kv: -kv[1][0])
            if ms >= 0.1)
            for n, r in _read_json(root, PEER_PHASES)["runs"].items() if n != "peer") + ".",
        *sources_block(root, [s for s, _ in PEER_PROFILES] + [PEER_PHASES]),
        "",
        "A block's rows agent by agent (each agent's envs in a row, so that a tile of four "
        "rows shares one group's parameters: the Tag duel's taggers and runners alternated "
        f"within every tile before), one seed, {on(root, FUSED_ROLLOUT_AGENT_MAJOR)}; "
        f"env-steps/s {AGENT_STEPS}:",
        "",
        *table(FUSED_HEADER, _fused_rows(_read_json(root, FUSED_ROLLOUT_AGENT_MAJOR))),
        "",
        f"The fused rollout's GPU tests at that commit: "
        f"`{_read_json(root, FUSED_GPU_TESTS)['log'].splitlines()[-1]}`.",
        *sources_block(root, [FUSED_ROLLOUT_AGENT_MAJOR, FUSED_GPU_TESTS]),
        "",
        "The Tag duel at 10 seeds, the same commit, "
        f"{on(root, TAG_PROFILES[0][0])}: at GPU sizes the forward pass's "
        "multiply-adds over 143,360 agents a step cost more than XLA's matmuls and the "
        "step-by-step launches together, so the trainer now runs launches of more than "
        "`MAX_FUSED_WORK` = 1e8 agents × parameters step by step (`jaxwarp/train/fused.py`):",
        "",
        *table(["case", "commit", "trainer", "ms per update", "device ms", "kernels",
                "rollout kernel ms"], _peer_profile_rows(root, TAG_PROFILES)),
        *sources_block(root, [s for s, _ in TAG_PROFILES]),
    ]
    return lines, [FUSED_ROLLOUT, ENV_PARAMS_OPERAND, FUSED_ROLLOUT_H100,
                   *(s for s, _ in PEER_PROFILES),
                   PEER_PHASES, FUSED_ROLLOUT_AGENT_MAJOR, FUSED_GPU_TESTS,
                   *(s for s, _ in TAG_PROFILES)]


TIME_TO_RETURN_RNN_NOW = Source("time_to_return_rnn_h200.json",
                                "python experiments/bench_time_to_return.py --cases mpe_rnn,"
                                "mpe_mappo --scale both")


TIME_TO_RETURN_RNN = Source("time_to_return_rnn_h100.json",
                            "python experiments/bench_time_to_return.py --cases mpe_rnn,mpe_mappo "
                            "--scale gpu --total-steps 10000000")


TIME_TO_RETURN_MAPPO = Source("time_to_return_mappo_h100.json",
                              "python experiments/bench_time_to_return.py --cases mpe_mappo "
                              "--scale gpu --total-steps 10000000")


def section_time_to_return_rnn(root: Path) -> tuple[list[str], list[Source]]:
    now = _read_json(root, TIME_TO_RETURN_RNN_NOW)
    lines = [
        "## Time to a return: recurrent policies and a centralised critic (MPE)",
        "",
        "The same benchmark for `policies.agent.model=gru` (`mpe_rnn`) and `model=gru` with "
        "`critic=centralised` (`mpe_mappo`) against pure-JAX IPPO-RNN and MAPPO-RNN peers "
        "(`experiments/rnn_reference.py`, written from JaxMARL's published algorithms and "
        "checked to run at the speed of JaxMARL's own scripts, [The recurrent peers against "
        "JaxMARL's scripts](#the-recurrent-peers-against-jaxmarls-scripts)) at JaxMARL's "
        "`ippo_rnn_mpe` / `mappo_homogenous_rnn_mpe` hyperparameters, "
        f"{now['meta']['seeds']} seeds vmapped per trainer, {on(root, TIME_TO_RETURN_RNN_NOW)}. "
        "JaxMARL's sizes (16 × 128) ran 5e5 env-steps per seed (their configs: 1e7; the "
        "learning rate anneals over the shorter run), the GPU sizes (1,024 × 32) 1e7; each "
        f"pair jaxwarp vs peer; env-steps/s {AGENT_STEPS}:",
        *_time_to_return_table(root, TIME_TO_RETURN_RNN_NOW),
        "",
        "Earlier, on an H100, against these peers before they were made as fast as JaxMARL's "
        "scripts (they replayed the whole network step by step in their update; the speed "
        "ratios are not comparable with the table above), with the feed-forward centralised "
        "critic and one optimiser (first source) and with today's GRU critic (second):",
        *sources_block(root, [TIME_TO_RETURN_RNN, TIME_TO_RETURN_MAPPO]),
    ]
    return lines, [TIME_TO_RETURN_RNN_NOW, TIME_TO_RETURN_RNN, TIME_TO_RETURN_MAPPO]


SAMPLE_EFFICIENCY = Source("sample_efficiency_h100.json",
                           "python experiments/bench_sample_efficiency.py --cases cartpole,mpe "
                           "--scales paper,gpu --seeds 10 --backend cuda")


def section_sample_efficiency(root: Path) -> tuple[list[str], list[Source]]:
    data = _read_json(root, SAMPLE_EFFICIENCY)
    rows = []
    for c in data["cases"]:
        for layout, v in c["layouts"].items():
            curve = v["env_steps_to_threshold_mean_curve"]
            rows.append([f"`{c['case']}`, {c['scale']} sizes", f"`{layout}`",
                         f"{v['batch_env_steps']:,}",
                         f"{c['threshold']:.1f}",
                         f"{v['env_steps_to_threshold_seed_mean'] / 1e3:,.0f}K ± "
                         f"{v['env_steps_to_threshold_ci95'] / 1e3:,.0f}K",
                         "never" if curve is None else f"{curve / 1e3:,.0f}K",
                         pm(v["final_return_mean"], v["final_return_ci95"])])
    runs = [m["command"] for m in data.get("meta_runs", [data["meta"]])]
    lines = [
        "## PPO minibatches: env sequences or single steps",
        "",
        "`experiments/bench_sample_efficiency.py`: the `cartpole` and `mpe` cases of the "
        "time-to-return benchmark (the peers' hyperparameters, at their published sizes and "
        "GPU-sized batches) trained with `minibatch_layout=envs` (whole env sequences) and "
        "`samples` (single steps drawn from the batch, PureJaxRL's and JaxMARL's layout), "
        f"{data['cases'][0]['seeds']} seeds each. Env-steps until the smoothed return reaches "
        "the threshold (90% of the way from the first return to the lower final one; MPE at "
        "paper sizes ran 5e6 env-steps, half JaxMARL's, the learning rate annealed over them): per "
        "seed, mean ± 95% interval, and of the seed-mean curve; final return: mean of the last "
        "5% of updates per seed, ± 95% interval. Env-steps do not depend on the device:",
        "",
        *table(["case", "layout", "batch env-steps", "threshold", "env-steps to threshold",
                "seed-mean curve", "final return"], rows),
        "",
        "The file holds the runs of " + " and ".join(code(r) for r in runs) + ".",
        *sources_block(root, [SAMPLE_EFFICIENCY]),
    ]
    return lines, [SAMPLE_EFFICIENCY]


MEMORY = Source("memory_cartpole_h100.json",
                "python experiments/bench_memory.py --seeds 8 --steps 500000")


def section_memory(root: Path) -> tuple[list[str], list[Source]]:
    data = _read_json(root, MEMORY)
    rows = [[f"`{r['case'].split('_')[0]}` ({' '.join(code(o) for o in r['overrides'])})",
             "hidden" if r["hide_velocities"] else "observed", f"{r['env_steps']:,}",
             str(r["seeds"]), pm(r["final_return_mean"], r["final_return_ci95"])]
            for r in data["rows"]]
    lines = [
        "## Is memory learned? A recurrent policy on a partially observed CartPole",
        "",
        "`experiments/bench_memory.py`: the shipped `cartpole_ppo` settings with the velocities "
        "hidden (`env_params.hide_velocities=true`) for a feed-forward and a recurrent model, "
        "and the feed-forward model on the full observation as the ceiling; return = mean "
        f"over the last 10% of updates per seed, then mean ± 95% t interval over seeds, "
        f"{on(root, MEMORY)}:",
        "",
        *table(["model", "velocities", "env-steps", "seeds", "return"], rows),
        *sources_block(root, [MEMORY]),
    ]
    return lines, [MEMORY]


SANITIZE = [Source("sanitize_kernels_h200.json", "bash experiments/tools/gpu_tests.sh sanitize")]


def section_sanitizers(root: Path) -> tuple[list[str], list[Source]]:
    rows = []
    d = _read_json(root, SANITIZE[0])
    res = d["results"]
    for target in sorted({r["target"] for r in res}):
        mine = [r for r in res if r["target"] == target]
        ours = sum(r["reports_in_our_kernels"] for r in mine)
        rows.append([f"`{target}`", ", ".join(sorted({r["tool"] for r in mine})),
                     str(sum(r["cases_run"] for r in mine)), str(ours),
                     "clean" if ours == 0 and all(r["returncode"] == 0 for r in mine)
                     else "reports"])
    lines = [
        "## GPU kernels under compute-sanitizer",
        "",
        "`experiments/sanitize_kernels.py`: an env's reset and step kernels (small and "
        "many-agent sizes, both launch layouts, auto-resets, out-of-range actions) under "
        "compute-sanitizer's memcheck, racecheck, initcheck and synccheck; the script covers "
        "every registered env, the tutorial's `goal_reach` and the sampler; a planted "
        f"out-of-bounds write is {'reported' if d['planted_write_caught'] else 'NOT reported'} "
        "by memcheck:",
        "",
        *table(["target", "tools", "cases (all tools)", "reports in jaxwarp kernels", "result"],
               rows),
    ]
    return lines + sources_block(root, SANITIZE), SANITIZE


PYTEST_LOG = "pytest_gpu_h200.log"
PYTEST_MAKES = "bash experiments/tools/gpu_tests.sh tests"
H200 = "NVIDIA H200"
# The GPU test log's parts: what each group of tests covers.
PYTEST = [(Source(PYTEST_LOG, PYTEST_MAKES, device=H200, part=f"group{i}"), what)
          for i, what in enumerate([
              "conformance suite on `cuda`: Tag, gridworld and MPE envs",
              "conformance suite on `cuda`: the other envs",
              "authoring, classic-control, MPE and PyCUDA GPU tests",
              "Tag, gridworld and fused-rollout GPU tests",
              "sampler and adapter GPU tests",
              "trainer GPU tests (same bits twice, resumed runs, the fused kernels, the GRU)",
              "the fused MLP kernels against XLA's layers",
              "every other file's GPU tests: env params, a throwaway env on `cuda`, the "
              "Mosaic GPU forward (the two-GPU tests skip)",
          ], start=1)]
# The earlier run of the same groups on an H100, which docs/adapters.md and
# docs/decisions.md cite.
PYTEST_H100 = Source("pytest_gpu_h100.log", "bash experiments/tools/gpu_tests.sh tests",
                     device=H100)


def _pytest_counts(text: str) -> str:
    """A pytest log's summary line without its timing; where a log part holds
    several processes ("$ command" lines), each one's, joined by "; ", and for
    a process stopped before its summary, its progress characters counted."""
    counts = []
    for run in re.split(r"^\$ .*$", text, flags=re.M):  # a part's first "$" line is gone
        lines = [line for line in run.strip().splitlines() if line and not line.startswith("#")]
        if not lines:
            continue
        summary = [line for line in lines if re.search(r"\d+ (passed|failed|skipped|error)", line)]
        if summary:
            counts.append(re.sub(r"\s+in [\d.]+s.*$", "", summary[-1]).strip())
            continue
        progress = "".join(re.sub(r"\s*\[\s*\d+%\]$", "", line) for line in lines
                           if re.fullmatch(r"[.sFE]+(\s*\[\s*\d+%\])?", line))
        skipped = f", {progress.count('s')} skipped" if "s" in progress else ""
        counts.append(f"{progress.count('.')} passed, {progress.count('F')} failed{skipped}, "
                      f"{progress.count('E')} errors before the process was stopped")
    return "; ".join(counts)


def section_gpu_tests(root: Path) -> tuple[list[str], list[Source]]:
    rows = []
    for src, what in PYTEST:
        rows.append([what, _pytest_counts(_text(root, src)), f"`{src.path}` (`{src.part}`)"])
    h100 = _text(root, PYTEST_H100)
    h100_commit = re.match(r"# commit (\w+)", h100).group(1)
    rerun = re.search(r"^# rerun alone at commit (\w+)", h100, re.M)
    log = Source(PYTEST_LOG, PYTEST_MAKES, device=H200)
    return ["## GPU test runs", "",
            "Every `gpu`-marked test and `tests/test_mlp_kernel.py`, in pytest processes at once "
            f"on one GPU ({devices(root, log)}; the log's first lines name the commit, how many "
            "processes ran at once and in which calls):", "",
            *table(["tests", "result", "file"], rows), "",
            f"The same groups on an {devices(root, PYTEST_H100)}, the processes sharing one "
            f"GPU, at commit {h100_commit}"
            + (f" (group 6 rerun at {rerun.group(1)})" if rerun else "")
            + f": `{RESULTS / PYTEST_H100.path}` (cited by [`adapters.md`](adapters.md) and "
            "[`decisions.md`](decisions.md)).",
            *sources_block(root, [log, PYTEST_H100])], [s for s, _ in PYTEST] + [PYTEST_H100]


PIP_CUDA = Source("gpu_pip_cuda_h100.log",
                  "bash experiments/tools/gpu_pip_cuda.sh (two calls: carry .whl/1, then .whl/2)",
                  device=H100)


def section_pip_cuda(root: Path) -> tuple[list[str], list[Source]]:
    text = _text(root, PIP_CUDA)
    keep = ("finder's nvcc", "goal_reach on cuda", "goal_reach cuda vs", "(prebuilt) cuda vs",
            "PASS", "50/50 updates", "cache after the run")
    lines = [ln for ln in text.splitlines() if any(k in ln for k in keep)]
    return ["## Installing from the wheel, CUDA from pip", "",
            "The jaxwarp wheel and NVIDIA's CUDA 13 wheels (`[cuda13]`) in a fresh venv on "
            "the GPU machine, the system CUDA toolkit hidden (PATH without it, `CUDA_HOME` "
            "unset): the nvcc the finder picks, a user env (`examples/goal_reach`) compiled "
            "at first use and checked against its pure-JAX reference and the `cpu` backend, "
            "built-in envs from the wheel's prebuilt libraries (nothing compiled for them) "
            "and a short PPO run. From the log:", "", "```", *lines, "```",
            *sources_block(root, [PIP_CUDA])], [PIP_CUDA]


CURVES = [
    ("`jaxwarp train --config tag_duel_cpu`: both groups' returns per update; the run's "
     "trained-vs-random GIF", None,
     [Source("duel_h100/learning_curve.png", DUEL_LOG.makes, device=H100),
      Source("duel_h100/trained_vs_random.gif", DUEL_LOG.makes, device=H100)]),
    ("`experiments/learn_tag.py --config tag_chase`: tags per episode against wall clock",
     LEARN_TAG_CSV, [Source("learn_tag_h100/learn_tag.png", LEARN_TAG.makes, device=H100)]),
    ("`experiments/learn_compare.py`, A2C at 2,000 envs: f32 against bf16",
     Source("learn_compare_a2c_h100/learn_compare.csv", LEARN_A2C.makes, device=H100),
     [Source("learn_compare_a2c_h100/learn_compare.png", LEARN_A2C.makes, device=H100)]),
    ("`experiments/learn_compare.py`, `tag_2000_envs`'s PPO: f32 separate torsos against bf16 "
     "shared torso", Source("learn_compare_ppo_h100/learn_compare.csv", LEARN_PPO.makes,
                            device=H100),
     [Source("learn_compare_ppo_h100/learn_compare.png", LEARN_PPO.makes, device=H100)]),
    *((f"`jaxwarp train --config tag_{n}_agents`: per-update metrics of both groups; the "
       f"run's trained-vs-random GIF",
       Source(f"tag_{n}_agents_h100/metrics.csv", src.makes, device=H100),
       [Source(f"tag_{n}_agents_h100/{f}", src.makes, device=H100)
        for f in ("learning_curve.png", "trained_vs_random.gif")])
      for n, src in zip((100, 1000), TAG_RUNS)),
    ("`jaxwarp train --config cartpole_ppo`", CARTPOLE_CSV, []),
    ("`jaxwarp train --config mpe_simple_spread_ppo`", SPREAD_CSV, []),
]


def section_curves(root: Path) -> tuple[list[str], list[Source]]:
    rows, srcs = [], []
    for what, data, images in CURVES:
        part = f" (part `{data.part}`)" if data and data.part else ""
        rows.append([what, f"`{RESULTS / data.path}`{part}" if data else "—",
                     ", ".join(f"[`{Path(i.path).name}`](../{RESULTS / i.path})" for i in images)
                     or "—"])
        srcs += ([data] if data else []) + images
    lines = ["## Learning curves", "",
             "Per-update curves of the runs above (CSV: one row per update) and their plots "
             "(H100, one seed each):", "",
             *table(["run", "curve", "plots"], rows)]
    return lines, srcs



DET_COST = Source("determinism_cost_h100.json",
                  "python experiments/bench_scaling.py --part train --devices 1")
SCALE_ENV = Source("scaling_env_h200x4.json", "python experiments/bench_scaling.py --part env")
SCALE_TRAIN = Source("scaling_train_h200x4.json",
                     "python experiments/bench_scaling.py --part train")
# The same on two GPUs, an earlier commit: their efficiency beside the four GPUs'.
SCALE_ENV_2 = Source("scaling_env_h200x2.json", "python experiments/bench_scaling.py --part env")
SCALE_TRAIN_2 = Source("scaling_train_h200x2.json",
                       "python experiments/bench_scaling.py --part train")
TRAIN_PROCS = Source("train_processes_h200x4.json",
                     "three jaxwarp train commands (each row's command in the file)")
EXIT_CHECK = Source("exit_check_h200x4.json",
                    "python experiments/tools/exit_check.py --only two_processes train_cli")
_VARIANT = {"one": "1 GPU", "one_local": "1 GPU, per-env sums", "jit": "plain `jit`",
            "jit_local": "plain `jit`, per-env sums", "sharded_env": "`ShardedEnv`",
            "shard_map": "hand `shard_map`"}
_EXIT_VARIANT = {"two_processes": "two processes (`jax.distributed`), two GPUs each",
                 "train_cli": "one process, four GPUs"}


def _machine(root: Path, src: Source) -> str:
    """"N x DEVICE" of a bench_scaling.py file (the GPUs it saw)."""
    meta = _meta(root, src)
    return f"{meta['devices_seen']} x {meta['device']}"


def section_scaling(root: Path) -> tuple[list[str], list[Source]]:
    sources = [DET_COST, SCALE_ENV, SCALE_ENV_2, SCALE_TRAIN, SCALE_TRAIN_2, TRAIN_PROCS,
               EXIT_CHECK]
    lines = ["## Determinism and several GPUs", ""]
    rows = []
    res = _read_json(root, DET_COST)["results"]
    for r in res:
        if r["deterministic"]:
            twin = next(x for x in res if x["config"] == r["config"] and not x["deterministic"])
            n = r.get("num_agents") or agents_of(r["config"], r["overrides"])
            rows.append([f"`{r['config']}`", f"{r['num_envs']:,}",
                         rate(r["env_steps_per_s"], n, kilo_or_mega),
                         rate(twin["env_steps_per_s"], n, kilo_or_mega),
                         f"{100 * (1 - r['env_steps_per_s'] / twin['env_steps_per_s']):.1f}%"])
    lines += ["Training with XLA's deterministic GPU ops (`deterministic: true`, the "
              f"default) and without, one GPU ({devices(root, DET_COST)}), alternating in "
              f"one process; env-steps/s {AGENT_STEPS}:",
              "", *table(["config", "envs", "deterministic", "not", "cost"], rows), ""]

    two = {(r["env"], r["variant"]): r for r in _read_json(root, SCALE_ENV_2)["results"]
           if r["devices"] > 1}
    rows = [[f"`{r['env']}`", f"{r['envs_per_device']:,}", _VARIANT[r["variant"]],
             str(r["devices"]),
             rate(r["env_steps_per_s"], r.get("num_agents")
                  or agents_of(r["env"], params=r.get("params"))),
             f"{r['efficiency']:.2f}",
             f"{two[r['env'], r['variant']]['efficiency']:.2f}" if r["devices"] > 1 else "-"]
            for r in _read_json(root, SCALE_ENV)["results"]]
    lines += ["Envs alone, weak scaling (the same envs per GPU), "
              "`experiments/bench_scaling.py --part env`: the protocol scan, variants "
              "alternating in one process; efficiency = rate on D GPUs / (D × one GPU's, "
              "per-env sums against per-env sums). A mean over all envs returned every "
              "step (plain `jit`, `ShardedEnv`) is an all-reduce across GPUs every step. "
              f"On {_machine(root, SCALE_ENV)}, {AGENT_STEPS}; the last column is the "
              f"efficiency of the same variant on two GPUs ({_machine(root, SCALE_ENV_2)}, "
              f"commit {_meta(root, SCALE_ENV_2)['commit']}, against that run's one GPU):",
              "",
              *table(["env", "envs per GPU", "how", "GPUs", "M env-steps/s", "efficiency",
                      "efficiency on 2 GPUs"], rows), ""]

    rows = [[f"`{r['config']}`", _machine(root, src), f"{r['envs_per_device']:,}",
             str(r["devices"]), "yes" if r["deterministic"] else "no",
             rate(r["env_steps_per_s"], r.get("num_agents")
                  or agents_of(r["config"], r["overrides"]), kilo_or_mega),
             f"{r['efficiency']:.2f}"]
            for src in (SCALE_TRAIN, SCALE_TRAIN_2) for r in _read_json(root, src)["results"]]
    lines += ["Training, weak scaling in one process (`devices=`, envs split, gradients "
              "all-reduced), on the four GPUs of one machine and, at an earlier commit, the "
              "two of another (efficiency against the same machine's one GPU; GPUs: "
              f"{devices(root, SCALE_TRAIN, SCALE_TRAIN_2)}); env-steps/s {AGENT_STEPS}:", "",
              *table(["config", "machine", "envs per GPU", "GPUs", "deterministic",
                      "env-steps/s", "efficiency"], rows), ""]

    procs = _read_json(root, TRAIN_PROCS)
    agents = agents_of("tag_2000_envs", [])
    rows = [[r["run"], f"{r['num_envs']:,}", rate(r["env_steps_per_s"], agents, kilo_or_mega),
             f"{r['compile_s']:.1f}", f"{r['efficiency']:.2f}"] for r in procs["results"]]
    lines += ["The CLI itself, `jaxwarp train --config tag_2000_envs` (2,000 envs per GPU, "
              "checkpoints and metrics included, compile apart), on one GPU, on four in one "
              "process and as four processes of one GPU under `jax.distributed`, "
              f"{on(root, TRAIN_PROCS)}; env-steps/s {AGENT_STEPS}:", "",
              *table(["run", "envs", "env-steps/s", "compile s", "efficiency"], rows), ""]

    runs = _read_json(root, EXIT_CHECK)["variants"]
    rows = [[_EXIT_VARIANT.get(k, f"`{k}`"), str(v["rc"]), str(len(v["noise"])),
             f"{v['seconds']:.0f}"] for k, v in runs.items()]
    lines += ["The end of a run in several processes: `experiments/tools/exit_check.py` runs "
              "a small `jaxwarp train` (`tag_small_cpu` on `cuda`) as two processes under "
              "`jax.distributed` on one host and as one process, and counts the stderr lines "
              "that are not the program's own (XLA's glog lines, CUDA errors, gRPC "
              f"`CANCELLED` / `UNAVAILABLE` traces), on {devices(root, EXIT_CHECK)}:", "",
              *table(["run", "exit code", "stderr lines not the program's", "seconds"], rows),
              ""]
    return lines + sources_block(root, sources), sources


SWEEPS = [Source("sweep_mpe_h200.json",
                 "python experiments/bench_sweep.py --case mpe --out "
                 "experiments/results/sweep_mpe_h200.json"),
          Source("sweep_cartpole_h200.json",
                 "python experiments/bench_sweep.py --case cartpole --total-steps 500000 "
                 "--out experiments/results/sweep_cartpole_h200.json"),
          Source("sweep_devices_h200x2.json",
                 "python experiments/bench_sweep.py --case mpe --settings 64 --seeds 4 "
                 "--devices 1,2 --sequential 0 --out experiments/results/sweep_devices_h200x2.json",
                 device="2 x NVIDIA H200")]
LARGEST = [Source(f"sweep_largest_{case}_h200.json",
                  f"python experiments/bench_sweep.py --largest --case {case}")
           for case in ("mpe", "cartpole")]
_EXAMPLE = "jaxwarp sweep --config cartpole_ppo total_env_steps=300000 (docs/sweeps.md)"
SWEEP_EXAMPLE = [Source(f"sweep_cartpole_cpu/{f}", _EXAMPLE, device="x86_64 (2 cores)")
                 for f in ("run.log", "sweep.json", "sweep.png", "best.yaml")]


def _sweep_row(data: dict) -> list[str]:
    config = f"`{data['config']}` {' '.join(code(o) for o in data['overrides'])}"
    sweep, runs = data["sweep"], data["sequential_runs"]
    n, done = data["settings"], data["sequential_settings"]
    seq = sum(r["wall_s"] for r in runs)
    speed = f"{seq / sweep['wall_s']:.1f}x" + ("" if done == n else
                                                f" (at least: {done} of {n} runs timed)")
    return [config, f"{n} x {data['seeds']}", f"{data['env_steps_per_run']:,}",
            f"{sweep['wall_s']:.1f} s (compile {sweep['compile_s']:.1f} s)",
            f"{seq:.0f} s for {done} runs "
            f"({statistics.mean(r['wall_s'] for r in runs):.1f} s each)",
            speed]


def _bytes(b: float) -> str:
    return f"{sig(b / 1e9, 4)} GB" if b >= 1e9 else (
        f"{sig(b / 1e6)} MB" if b >= 1e6 else f"{sig(b / 1e3)} KB")


def _xla_runs(probe: dict) -> int:
    """The runs XLA's count of the probe's program fits in the device's limit."""
    return int(probe["memory_bytes"] // (probe["program_bytes"][0] / probe["runs"]))


def _largest_lines(root: Path) -> list[str]:
    """The largest sweep on one GPU: the counts, then the sweeps run in one program."""
    files = [_read_json(root, src) for src in LARGEST]
    mpe = files[0]
    assert _xla_runs(mpe["probe"]) == mpe["xla_runs"], "the report's count is not the script's"
    counts = []
    for d in files:
        p = d["probe"]
        counts.append([f"`{d['config']}` {' '.join(code(o) for o in d['overrides'])}",
                       f"{p['memory_bytes'] / 1e9:.1f} GB",
                       f"{p['check_runs']:,} ({_bytes(p['per_run_bytes'])} a run)",
                       f"{_xla_runs(p):,} ({_bytes(p['program_bytes'][0] / p['runs'])} a run)",
                       ratio(p["check_runs"] / _xla_runs(p)), f"{p['host_runs']:,}"])
    runs = []
    for d, key, what in [(files[0], "probe", "the probe"),
                         (files[0], "one_program_at_95_percent", "one program, 95%"),
                         (files[0], "one_program", "one program, 90%"),
                         (files[1], "probe", "the probe")]:
        r = d[key]
        bytes_ = r["program_bytes"][0]
        if "error" in r:
            m = re.search(r"allocate ([\d.]+) ?GiB", r["error"])
            result = ("out of memory" + (f" (its {m.group(1)} GiB of temporaries)" if m else "")
                      + f" after {r['wall_s']:.0f} s")
            compile_s = run_s = "-"
        else:
            result = rate(r["env_steps_per_s"], r["agents_per_env"])
            compile_s, run_s = f"{r['compile_s']:.1f} s", f"{sig(r['run_s'])} s"
        runs.append([d["case"], what, f"{r['runs']:,} ({r['settings']:,} x {r['seeds']})",
                     f"{_bytes(bytes_)} ({sig(100 * bytes_ / r['memory_bytes'], 2)}%)",
                     compile_s, run_s, result, r.get("commit", d["meta"]["commit"])])
    srcs = [{"commit": d["meta"]["commit"], "command": d["meta"]["command"],
             "date": d["meta"].get("date"), "what": f"{d['case']}: the probe and the counts"}
            for d in files]
    srcs.insert(1, {**{k: mpe["one_program_at_95_percent"][k] for k in ("commit", "command")},
                    "date": mpe["meta"].get("date"), "what": "`one_program_at_95_percent`"})
    srcs.insert(2, {**{k: mpe["one_program"][k] for k in ("commit", "command")},
                    "what": "`one_program`"})
    return [
        "### The largest sweep on one GPU",
        "",
        "`experiments/bench_sweep.py --largest`: how many runs of a case one GPU holds, "
        "counted three ways: by the memory check before compiling (parameters, optimiser "
        "and env state, one rollout: a lower bound from shapes), by XLA's count of a "
        f"compiled sweep of {mpe['probe']['runs']:,} runs (the probe, which also counts the "
        "update's temporaries), and by the host's memory (a quarter of it for the runs' "
        f"states between chunks); {on(root, *LARGEST)}:",
        "",
        *table(["case", "GPU memory limit", "the check's count", "XLA's count",
                "check ÷ XLA", "the host's count"], counts),
        "",
        f"Sweeps of {mpe['updates']} updates each (no checkpoint; a random learning rate per "
        "setting), XLA's count of each program against the limit, and env-steps/s over the "
        f"updates, {AGENT_STEPS}, on {devices(root, *LARGEST)}. The sweep of the MPE case "
        f"at 95% of the memory by XLA's count ({mpe['one_program_at_95_percent']['runs']:,} "
        "runs) failed to allocate its temporaries, so a program may now take 90% "
        "(`memory_guard.PROGRAM_SHARE`), a sweep of "
        f"{mpe['one_program']['runs']:,} runs (the 90% row). For CartPole only the counts were "
        f"measured (the file's note: {files[1]['meta']['note']}).",
        "",
        *table(["case", "sweep", "runs (settings x seeds)", "XLA's count of the program",
                "compile", "run", "M env-steps/s", "commit"], runs),
        *row_sources(root, LARGEST[0], srcs[:3], lambda r: r["what"], what="for")[:-1],
        f"Source: {cite(root, LARGEST[1])}  ",
        "",
    ]


def section_sweeps(root: Path) -> tuple[list[str], list[Source]]:
    rows = [_sweep_row(_read_json(root, src)) for src in SWEEPS[:2]]
    spread = _read_json(root, SWEEPS[2])
    agents = agents_of(spread["config"], spread["overrides"])
    dev = [[str(r["devices"]), f"{r['wall_s']:.1f} s", f"{r['compile_s']:.1f} s",
            f"{r['run_s']:.1f} s", rate(r["env_steps_per_s"], agents)]
           for r in spread["sweep_devices"]]
    lines = [
        "## Sweeps: settings x seeds in one program",
        "",
        "`experiments/bench_sweep.py`: a grid of learning rates x entropy coefficients, each "
        "with its seeds, as one `jaxwarp sweep` process against one `jaxwarp train --seeds S` "
        "process per setting (the seeds already vmapped, each process compiling its own "
        "program; no evaluation after training); wall clock of the whole commands, one after "
        f"the other, {on(root, *SWEEPS[:2])}:",
        "",
        *table(["config", "settings x seeds", "env-steps per run", "jaxwarp sweep",
                "jaxwarp train, one per setting", "speedup"], rows),
        "",
        f"The runs of a sweep split over the GPUs (each GPU trains whole runs; "
        f"`{spread['settings']} settings x {spread['seeds']} seeds` of the MPE row, "
        "on a machine of 2 x NVIDIA H200): the run phase speeds up by "
        f"{spread['sweep_devices'][0]['run_s'] / spread['sweep_devices'][1]['run_s']:.2f}x on "
        f"two GPUs; the compile and the start of the process do not ({AGENT_STEPS}):",
        "",
        *table(["GPUs", "wall clock", "compile", "run", "M env-steps/s (all runs)"], dev),
        "",
        "The worked example of [`sweeps.md`](sweeps.md) (CartPole, 4 learning rates x 3 seeds, "
        "300,000 env-steps each, on a 2-core CPU): "
        + ", ".join(f"[`{Path(x.path).name}`](../{RESULTS / x.path})" for x in SWEEP_EXAMPLE)
        + ".",
        *sources_block(root, [*SWEEPS, SWEEP_EXAMPLE[0]]),
        *_largest_lines(root),
    ]
    return lines, [*SWEEPS, *SWEEP_EXAMPLE, *LARGEST]


LAYER = Source("bench_layer_h200.json", "python experiments/bench_layer.py --sides xla,mma,mgpu")
GRU_SCAN = Source("bench_gru_scan_h200.json", "python experiments/bench_gru_scan.py")
GRU_SCAN_MMA = Source("bench_gru_scan_mma_h200.json",
                      "python experiments/bench_gru_scan.py --kernel mma --updates 0")
_LAYER_SIDES = {"xla": "XLA (cuBLAS)", "mma": "`mma.sync`, ours",
                "mgpu": "Mosaic GPU matmul, XLA's epilogue"}


def section_kernel_trials(root: Path) -> tuple[list[str], list[Source]]:
    """Kernels measured before they are written into the product (docs/decisions.md)."""
    layer = _read_json(root, LAYER)["results"]
    sides = [k for k in _LAYER_SIDES if k in layer[0]]
    rows = [[f"{r['rows']:,}", str(r["k"]),
             *(f"{r[k]['us_per_layer']:.1f} µs, {r[k]['tflops']:.0f} TFLOP/s"
               + ("" if k == "xla"
                  else f" ({r['xla']['us_per_layer'] / r[k]['us_per_layer']:.2f}×)")
               for k in sides)] for r in layer]
    gru = _read_json(root, GRU_SCAN)
    scan = [[f"{r['T']} × {r['B']}", str(r["H"]), f"{r['lax_scan_ms']:.2f}",
             f"{r['kernel_ms']:.2f}", ratio(r["lax_scan_ms"] / r["kernel_ms"])]
            for r in gru["scan"]]
    upd = {(r["size"], r["model"]): r for r in gru["update"]}
    sizes = sorted({s for s, _ in upd}, key=lambda s: upd[(s, "gru")]["env_steps_per_s"])
    urow = [[f"`{s}`", rate(upd[(s, "gru")]["env_steps_per_s"], 3, kilo_or_mega),
             rate(upd[(s, "gru_kernel")]["env_steps_per_s"], 3, kilo_or_mega),
             ratio(upd[(s, "gru_kernel")]["env_steps_per_s"] / upd[(s, "gru")]["env_steps_per_s"])]
            for s in sizes]
    lines = [
        "## Kernel trials", "",
        "Kernels measured before they are written into the product; the decisions they led to "
        "are in `docs/decisions.md` (\"The tool for tensor-core kernels\", \"Recurrent "
        "models\").", "",
        "One dense bfloat16 layer `relu(x @ w + b)`, K = N, chained 20 times in one jitted "
        f"scan, {on(root, LAYER)}: time a layer and TFLOP/s, speed against XLA's in brackets "
        "(up to 32K rows every side costs about one scan iteration):", "",
        *table(["rows", "K = N", *(_LAYER_SIDES[k] for k in sides)], rows),
        *sources_block(root, [LAYER]), "",
        "The GRU cell's scan (hidden size H) as one kernel a direction against the learner's "
        f"`lax.scan`, {on(root, GRU_SCAN)}; forward and backward of the scan alone (ms), then "
        f"whole PPO updates of MPE simple_spread with the shipped `gru` and with the kernel "
        f"(`gru_kernel`), env-steps/s {AGENT_STEPS}:", "",
        *table(["T × rows", "H", "`lax.scan` ms", "kernel ms", "kernel speed"], scan), "",
        *table(["size", "`gru`", "`gru_kernel`", "kernel speed"], urow),
        *sources_block(root, [GRU_SCAN]),
        *_gru_mma_lines(root),
        *_mosaic_layer_lines(root),
        *_mosaic_mlp_lines(root),
        *_mosaic_mlp_bwd_lines(root),
        *_mosaic_learner_lines(root),
    ]
    return lines, [LAYER, GRU_SCAN, GRU_SCAN_MMA, MOSAIC_LAYER, MOSAIC_MLP, MOSAIC_MLP_BWD,
                   MOSAIC_LEARNER, MOSAIC_LEARNER_TAG, PROFILE_MPE]


MOSAIC_LAYER = Source("bench_mosaic_layer_h200.json", "python experiments/bench_mosaic_layer.py")
_MOSAIC_SIDES = [("fwd", "xla", "mgpu_matmul", "mgpu_fused"), ("dx", "xla_dx", "mgpu_dx"),
                 ("dW", "xla_dw", "mgpu_dw")]


def _mosaic_layer_lines(root: Path) -> list[str]:
    """One layer's kernels alone (GPU kernel time, not a scan) against XLA's."""
    data = _read_json(root, MOSAIC_LAYER)
    rows = []
    for r in data["results"]:
        s = r["sides"]
        if not s:
            continue  # a shape the run's time budget left out

        def cell(name: str, base: str) -> str:
            if name not in s or s[name].get("check") != "ok":
                return "—"
            us = s[name]["us"]
            return f"{us:.1f}" if name == base else f"{us:.1f} ({ratio(s[base]['us'] / us)})"
        rows.append([f"{r['rows']:,}", f"{r['k']} × {r['n']}",
                     *(cell(n, part[1]) for part in _MOSAIC_SIDES for n in part[1:])])
    left = [f"{r['rows']:,} × {r['k']} × {r['n']}" for r in data["results"] if not r["sides"]]
    return [
        "",
        "The same layer's kernels alone on Pallas' Mosaic GPU backend (`experiments/"
        "bench_mosaic_layer.py`: GPU kernel time of one call, median of 7, no scan around "
        "it), K × N the layer's inputs × outputs, bfloat16 with float32 accumulation. "
        "Forward: XLA's dot with its fused epilogue, jax's own Hopper matmul "
        "(`hopper_matmul_mgpu`) with XLA's epilogue after it, and ours (a persistent, "
        "warp-specialised wgmma pipeline over tiles × K with the bias and activation in "
        "registers before one TMA store); the backward's dx (the same kernel, w read "
        "transposed) and dW (rows split over the blocks, partial tiles summed in a fixed "
        f"order). µs, speed against XLA's in brackets, {on(root, MOSAIC_LAYER)}"
        + (f"; the run's time budget left out {', '.join(left)}" if left else "") + ":",
        "",
        *table(["rows", "K × N", "fwd: XLA", "jax's matmul + XLA epilogue", "fwd: ours",
                "dx: XLA", "dx: ours", "dW: XLA", "dW: ours"], rows),
        *sources_block(root, [MOSAIC_LAYER]),
    ]


MOSAIC_MLP = Source("bench_mosaic_mlp_h200.json", "python experiments/bench_mosaic_mlp.py")


def _mosaic_mlp_lines(root: Path) -> list[str]:
    """The mlp policy's whole forward as one kernel (GPU kernel time) against XLA's chain."""
    data = _read_json(root, MOSAIC_MLP)
    rows = []
    for r in data["results"]:
        s = r["sides"]
        if "xla" not in s or s["xla"].get("check") != "ok":
            continue

        def cell(name: str) -> str:
            if s.get(name, {}).get("check") != "ok":
                why = s.get(name, {}).get("status", "not run").removeprefix("skipped: ")
                return f"— ({why.split(' (')[0]})"
            v = s[name]
            return (f"{v['us']:.1f} ({ratio(s['xla']['us'] / v['us'])}, "
                    f"{100 * v['peak_fraction']:.0f}% of peak)")
        rows.append([f"{r['rows']:,}", f"{r['d']} × {r['h']}",
                     f"{s['xla']['us']:.1f} ({100 * s['xla']['peak_fraction']:.0f}% of peak)",
                     cell("mgpu_mlp"), cell("mgpu_mlp_slab")])
    cfg = data["config"]
    return [
        "",
        "The shipped `mlp` policy's whole forward (shared torso: D inputs, two hidden layers of "
        f"H, {cfg['acts']}, {cfg['actions']} logits and a value) as ONE Pallas Mosaic GPU "
        "kernel (`experiments/bench_mosaic_mlp.py`: weights resident in shared memory, the "
        "hidden activations kept in registers as the next wgmma's operand, a persistent "
        "warp-specialised pipeline over row blocks) against the same MLP as XLA's dot chain; "
        "GPU kernel time of one call in µs (median of 7), speed against XLA's and the fraction "
        "of the dense bf16 peak in brackets; `ours` includes the slices that cut the logits and "
        "the value out of the kernel's float32 [rows, 16] slab, `ours, slab` is the kernel "
        f"alone; values within {cfg['tolerance']} (relative) of a float32 reference with the "
        f"same bf16 casts, {on(root, MOSAIC_MLP)}:",
        "",
        *table(["rows", "D × H", "XLA", "ours", "ours, slab"], rows),
        *sources_block(root, [MOSAIC_MLP]),
    ]


MOSAIC_MLP_BWD = Source("bench_mosaic_mlp_bwd_h200.json",
                        "python experiments/bench_mosaic_mlp_bwd.py")


def _mosaic_mlp_bwd_lines(root: Path) -> list[str]:
    """The same mlp's forward + backward as two kernels against XLA's autodiff."""
    data = _read_json(root, MOSAIC_MLP_BWD)
    rows = []
    for r in data["results"]:
        s = r["sides"]
        if s.get("xla_step", {}).get("check") != "ok":
            continue

        def cell(name: str) -> str:
            v = s.get(name, {})
            if v.get("check") != "ok":
                return "—"
            speed = f"{ratio(s['xla_step']['us'] / v['us'])}, " if name == "mgpu_step" else ""
            return f"{v['us']:.1f} ({speed}{100 * v['peak_fraction']:.0f}% of peak)"
        worst = max(max(s[n]["grad_errors"].values()) for n in ("mgpu_step", "mgpu_bwd")
                    if s.get(n, {}).get("check") == "ok")
        rows.append([r["act"], f"{r['rows']:,}", f"{r['d']} × {r['h']}",
                     f"{s['xla_step']['us']:.1f}", cell("mgpu_step"), cell("mgpu_bwd"),
                     f"{worst:.1e}"])
    cfg = data["config"]
    return [
        "",
        "The same policy's forward and backward (every weight and bias gradient from the "
        "heads' gradient) as two Mosaic GPU kernels (`experiments/bench_mosaic_mlp_bwd.py`: "
        "the backward recomputes the forward, takes dz2 and dz1 through transposed wgmmas, "
        "accumulates the weight gradients in float32 registers across a CTA's row blocks and "
        "sums the CTAs' partials in one fixed order) against XLA's autodiff of the same "
        "forward; D = H = 64, the widest the backward's registers hold. GPU kernel time of "
        "one forward + backward (`ours`) and of the backward alone, µs, with the speed against "
        "XLA's forward + backward (for the pair) and the fraction of the dense bf16 peak in "
        "brackets; the largest "
        "relative error of any gradient against a float32 reference with the same bf16 casts "
        f"(tolerance {cfg['tolerance']}), {on(root, MOSAIC_MLP_BWD)}:",
        "",
        *table(["activation", "rows", "D × H", "XLA fwd + bwd", "ours, fwd + bwd",
                "ours, bwd alone", "gradient error"], rows),
        *sources_block(root, [MOSAIC_MLP_BWD]),
    ]


MOSAIC_LEARNER = Source("bench_mosaic_learner_h200.json",
                        "python experiments/bench_mosaic_learner.py")
MOSAIC_LEARNER_TAG = Source("bench_mosaic_learner_tag_h200.json",
                            "python experiments/bench_mosaic_learner.py --case tag_a2c")


def _learner_rows(data: dict, sides: dict[str, str]) -> list[list[str]]:
    """A `bench_mosaic_learner.py` file's rows: activation, side, rate, ms an
    update (all, rollout, learner), speed against the shipped `mlp`."""
    rows = []
    for r in data["results"]:
        base = r["sides"]["mlp"]
        for name, v in r["sides"].items():
            if "seconds_per_update" not in v:
                continue
            rows.append([r["act"], sides[name], rate(v["env_steps_per_s"], r["agents"]),
                         f"{1e3 * v['seconds_per_update']:.2f}",
                         f"{1e3 * v['rollout_seconds_per_update']:.2f}",
                         f"{1e3 * v['learner_seconds_per_update']:.2f}",
                         ratio(base["seconds_per_update"] / v["seconds_per_update"])])
    return rows


def _mosaic_learner_lines(root: Path) -> list[str]:
    """The kernel pair inside whole PPO updates, and where that update's time goes."""
    data = _read_json(root, MOSAIC_LEARNER)
    rows = _learner_rows(data, {"mlp": "shipped `mlp` (XLA's layers)",
                                "mosaic": "the kernel pair",
                                "emulated": "the same `custom_vjp` on XLA ops"})
    diffs = [v.get("first_update_rel_diff", {}).get("loss", 0.0) for r in data["results"]
             for v in r["sides"].values() if "seconds_per_update" in v]  # _learner_rows' order
    rows = [row + [f"{d:.1e}"] for row, d in zip(rows, diffs)]
    prof = _read_json(root, PROFILE_MPE)
    gpu = prof["gpus"][0]
    phases = "; ".join(f"{ph['phase']} {ph['ms']:.2f} ms ("
                       + ", ".join(f"{k[:32]} {t:.2f}" for k, t in ph["top_kernels"][:2]) + ")"
                       for ph in prof["phases"] if ph["ms"] >= 0.1)
    return [
        "",
        "The kernel pair inside whole PPO updates (`experiments/bench_mosaic_learner.py`: a "
        "Flax model with the shipped shared-torso bf16 `mlp`'s maths and parameters whose "
        "forward is a `custom_vjp` of the two kernels, passed by `models=`; observations "
        "padded to 64 columns, rows to 256), MPE simple_spread at "
        f"{_case(data['config']['env_config'], data['config']['overrides'][:4])}, bf16 "
        f"64-64, one seed, {on(root, MOSAIC_LEARNER)}. Env-steps/s, ms per update (the "
        "rollouts alone and the rest, the learner), speed against the shipped `mlp`, and the "
        "first update's loss against the shipped model's (relative):",
        "",
        *table(["activation", "model", "M env-steps/s (agent-steps/s)", "ms / update",
                "rollout ms",
                "learner ms", "speed", "first loss diff"], rows),
        *sources_block(root, [MOSAIC_LEARNER]),
        "",
        f"Why it does not pay here: the shipped `mlp` update at the same size by phase "
        f"(command buffers off, {on(root, PROFILE_MPE)}) runs {gpu['kernels']:,} kernels "
        f"for {gpu['kernel_ms']:.1f} ms of kernel time, about "
        f"{1e3 * gpu['kernel_ms'] / gpu['kernels']:.1f} µs each; by phase: {phases}. The "
        "matmuls are a small share of forward and backward (the log-softmax, entropy and "
        "ratio reductions are larger), so replacing them saves at most a few tenths of a "
        "millisecond, about what padding the rows and packing the heads costs (the "
        "`custom_vjp` on XLA ops, above).",
        *sources_block(root, [PROFILE_MPE]),
        *_tag_learner_lines(root),
    ]


def _tag_learner_lines(root: Path) -> list[str]:
    """The forward kernel alone inside whole A2C updates at Tag's scale."""
    data = _read_json(root, MOSAIC_LEARNER_TAG)
    r = data["results"][0]
    rows = _learner_rows(data, {"mlp": "shipped `mlp` (its Pallas kernels)",
                                "mosaic_fwd": "the forward kernel, XLA's backward",
                                "emulated": "the same `custom_vjp` on XLA ops"})
    return [
        "",
        "The forward kernel at Tag's scale (`bench_mosaic_learner.py --case tag_a2c`: "
        f"{_case(data['config']['env_config'], data['config']['overrides'][:5])}, A2C, "
        f"both groups bf16 256-256 relu, {r['obs_dim']} observation features, "
        f"{on(root, MOSAIC_LEARNER_TAG)}). There is no backward kernel at H = 256, so the "
        "model's backward is the VJP of XLA's forward (recomputed), and the forward does not "
        f"fit in shared memory as one call: {r['forward_kernel']}. Env-steps/s, ms per update "
        "(rollouts alone, learner), speed against the shipped model:",
        "",
        *table(["activation", "model", "M env-steps/s (agent-steps/s)", "ms / update",
                "rollout ms",
                "learner ms", "speed"], rows),
        *sources_block(root, [MOSAIC_LEARNER_TAG]),
    ]


def _gru_mma_lines(root: Path) -> list[str]:
    """The GRU scan with its step's matmul on tensor cores."""
    mma = _read_json(root, GRU_SCAN_MMA)
    rows = [[f"{r['T']} × {r['B']}", str(r["H"]), f"{r['lax_scan_ms']:.2f}",
             f"{r['kernel_ms']:.2f}", ratio(r["lax_scan_ms"] / r["kernel_ms"]),
             f"{r['lax_scan_kernels']['count']:,} / {r['kernel_kernels']['count']}",
             f"{1e3 * r['kernel_kernels']['kernel_ms'] / (2 * r['T']):.1f}"]
            for r in mma["scan"]]
    return [
        "",
        "The same scan with the step's matmul on tensor cores (`kernels/gru_scan_mma.cu`: a "
        "block per 16 rows through every step, `mma.sync` with TF32 inputs and float32 "
        "accumulation as XLA's default float32 dot, the recurrent kernels in shared memory), "
        f"{on(root, GRU_SCAN_MMA)}; its values and gradients differ from full float32 "
        "precision as much as `lax.scan`'s do at XLA's default precision (the same to two "
        "digits). Forward and "
        "backward of the scan alone (ms), GPU kernels a call (`lax.scan` / kernel) and the "
        "kernel's microseconds a step and direction:", "",
        *table(["T × rows", "H", "`lax.scan` ms", "kernel ms", "kernel speed",
                "kernels a call", "µs a step"], rows),
        *sources_block(root, [GRU_SCAN_MMA]),
    ]


SECTIONS: list[Section] = [section_tag, section_launch, section_mpe, section_cartpole,
                           section_other_envs, section_envpool, section_host, section_training,
                           section_learner, section_learner_tail, section_heads_kernel,
                           section_mosaic_forward, section_mosaic_learner_forward,
                           section_ppo_grad, section_permutation, section_targets,
                           section_obs_buffer,
                           section_time_to_policy,
                           section_tag_runs,
                           section_time_to_return, section_fused_rollout,
                           section_time_to_return_rnn,
                           section_memory, section_sample_efficiency, section_pip_cuda,
                           section_curves, section_sanitizers, section_gpu_tests,
                           section_scaling, section_sweeps, section_kernel_trials]


def render(root: Path = ROOT) -> tuple[str, list[Path]]:
    """The page, and every result file it cites (paths relative to root)."""
    out = [
        "<!-- Generated by experiments/report.py from experiments/results/; do not edit by "
        "hand. Regenerate: python experiments/report.py -->",
        "# Benchmarks",
        "",
        "Every figure below is read from a result file under `experiments/results/` by "
        "`experiments/report.py`; each table names its files with the device, commit and "
        "command they record (files written before result files recorded their commit say "
        "`commit: not recorded`, and the command that makes such a file is given instead). "
        "M = 10⁶, K = 10³, G = 10⁹. An env-step is one step of one env with all its agents, "
        "an agent-step one agent's step (env-steps × agents per env); throughput is in "
        "env-steps/s with agent-steps/s beside it where an env has several agents, and each "
        "table names its device. Peers count differently: PufferLib's steps/s are agent-steps, "
        "WarpDrive's paper reports env-steps, EnvPool, gymnax and JaxMARL count env-steps. "
        "Why the code is as it is, with the measurements that decided it: "
        "[`decisions.md`](decisions.md).",
        "",
    ]
    cited: list[Path] = []
    for section in SECTIONS:
        lines, sources = section(root)
        out += [*lines, ""]
        cited += [RESULTS / s.path for s in sources]
    text = "\n".join(out).rstrip() + "\n"
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text, sorted(set(cited))


# ---------------------------------------------------------------------------
# Curves to CSV.

def curves_to_csv(path: Path) -> Path:
    """Move the per-update curves of a learn_tag.py / learn_compare.py JSON into
    a CSV beside it (same stem); the JSON keeps its summary and names the CSV."""
    data = json.loads(path.read_text())
    out = path.with_suffix(".csv")

    def cell(v: Any) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return ""
        return repr(float(v)) if isinstance(v, float) else str(v)

    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        if "trained" in data:  # learn_tag.py
            t = data["trained"]
            cols = [c for c in ("wall_s", "env_steps", "tags_per_episode",
                                "tags_per_episode_smoothed", "tagger_episode_return") if c in t]
            w.writerow(["update", *cols])
            for i in range(len(t[cols[0]])):
                w.writerow([i + 1, *(cell(t[c][i]) for c in cols)])
            for c in cols:
                del t[c]
            t["curve"] = out.name
        else:  # learn_compare.py
            cols = ["env_steps", "tags_per_episode", "tags_per_episode_smoothed",
                    "tagger_episode_return"]
            w.writerow(["variant", "update", *cols])
            for name, v in data["variants"].items():
                for i in range(len(v["env_steps"])):
                    w.writerow([name, i + 1, *(cell(v[c][i]) for c in cols)])
                for c in cols:
                    del v[c]
                v["curve"] = out.name
    path.write_text(json.dumps(data, indent=1) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/benchmarks.md is stale")
    ap.add_argument("--curve-csv", type=Path, metavar="JSON",
                    help="move a learn_tag/learn_compare JSON's curves into a CSV")
    args = ap.parse_args(argv)
    if args.curve_csv:
        print(f"wrote {curves_to_csv(args.curve_csv)}")
        return 0
    text, cited = render(ROOT)
    missing = [str(p) for p in cited if not (ROOT / p).is_file()]
    if missing:
        print(f"report: error: cited files missing: {', '.join(missing)}", file=sys.stderr)
        return 2
    page = ROOT / PAGE
    if args.check:
        if not page.is_file() or page.read_text() != text:
            print(f"report: {PAGE} is not up to date; run python experiments/report.py",
                  file=sys.stderr)
            return 1
        return 0
    page.write_text(text)
    print(f"wrote {PAGE} ({len(cited)} result files cited)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
