"""Every jaxwarp CUDA kernel under NVIDIA compute-sanitizer.

For each tool (memcheck, racecheck, initcheck, synccheck) and each target
(every registered env's reset and step kernels, the tutorial's goal_reach,
the action sampler), this script runs a child
process under ``compute-sanitizer --tool TOOL`` that resets and steps the env
eagerly on the GPU (episodes cut short so the auto-reset path runs, actions
out of range every few steps so the clamps run), at small and many-agent
sizes, with env counts that leave a partly filled last block. Only kernels
whose name contains "jaxwarp" are instrumented (XLA's own are not ours to
fix). Each buffer is its own allocation (``XLA_PYTHON_CLIENT_ALLOCATOR=
platform``) and XLA command buffers are off, so an out-of-bounds access or an
uninitialized read cannot hide inside a larger pool.

Writes a JSON summary (errors per tool and target, the first reports of each)
and the full sanitizer log.

    JAXWARP_NVCC_FLAGS=-lineinfo python experiments/sanitize_kernels.py \\
        --out experiments/results/sanitize_kernels_h100.json
    python experiments/sanitize_kernels.py --child cartpole   # one target, no sanitizer
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
SAMPLER = "sampler"
GOAL_REACH = "goal_reach"
# goal_reach with one out-of-bounds write planted: memcheck must report it
# (proof that the kernel filter instruments our kernels); not in `clean`.
PLANTED = "planted_out_of_bounds"

# Tag's cases cover each neighbour-search path and both launch layouts
# (state staged in shared memory, and in global memory at 1000 agents).
TAG_CASES = [
    ({"num_taggers": 1, "num_runners": 2, "num_other_agents_observed": 2}, 3),  # 3 agents
    ({"num_taggers": 10, "num_runners": 100}, 3),  # warpdrive_default
    ({"num_taggers": 20, "num_runners": 280}, 2),  # uniform grid
    ({"num_taggers": 3, "num_runners": 9, "use_full_observation": True}, 3),  # full observation
    ({"num_taggers": 2, "num_runners": 30, "num_other_agents_observed": 20}, 3),  # k > 16: selection
    ({"num_taggers": 50, "num_runners": 950}, 2),  # large: 1000 agents
]
# Other envs: their default agents, and more where the env has a knob for it.
MANY = {
    "tag_gridworld": [({}, 3), ({"num_taggers": 50}, 2)],
    "mpe_simple_spread": [({}, 3), ({"num_agents": 64, "num_landmarks": 64}, 2)],
    "mpe_simple_tag": [({}, 3)],
    GOAL_REACH: [({"num_agents": 3}, 3), ({"num_agents": 700}, 2)],
}
# Single-agent envs pack many envs per block: 3 envs (one partly filled
# block) and 300 (several blocks, the last one partly filled).
SINGLE = [({}, 3), ({}, 300)]
STEPS = 6
BACKEND = "cuda"  # --backend cpu checks the script itself on a machine without a GPU


def targets() -> list[str]:
    import jaxwarp

    return [*jaxwarp.registered_envs(), GOAL_REACH, SAMPLER]


def _short_episodes(params_cls, params: dict) -> dict:
    """Episode length 3, so STEPS steps run the auto-reset path."""
    import dataclasses

    names = {f.name for f in dataclasses.fields(params_cls)}
    for knob in ("episode_length", "max_steps"):
        if knob in names:
            return {**params, knob: 3}
    return params


def run_env(env, num_envs: int) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    nvec = np.asarray(env.action_space.nvec)
    obs, state = env.reset(jax.random.key(0), num_envs)
    for t in range(STEPS):
        a = env.action_space.sample(jax.random.key(t), (num_envs, env.num_agents))
        if t % 3 == 2:  # out of range both ways: the kernels clamp
            a = jnp.where(a % 2 == 0, -3, jnp.asarray(nvec) + 2).astype(a.dtype)
        obs, state, reward, done, _ = env.step(jax.random.key(100 + t), state, a)
    jax.block_until_ready((obs, state, reward, done))
    assert np.isfinite(np.asarray(obs)).all()


def child(target: str) -> None:
    import jax
    import jax.numpy as jnp

    import jaxwarp

    if target == SAMPLER:
        # Rows kernel (heads <= 64 choices: Tag's (11, 10), one head of 2, of
        # 64) and warp kernel (a head of 100), row counts off the tile size.
        for nvec, rows in (((11, 10), (5, 110)), ((2,), (3,)), ((64,), (1000, 3)),
                           ((100,), (7, 3)), ((5, 100), (33,))):
            logits = jax.random.normal(jax.random.key(1), (*rows, sum(nvec)), jnp.float32)
            for seed in range(2):
                out = jaxwarp.sample_actions(jax.random.key(seed), logits, nvec, backend=BACKEND)
                jax.block_until_ready(out)
            print("ran", target, nvec, rows, flush=True)
        return
    if target in (GOAL_REACH, PLANTED):
        sys.path.insert(0, str(ROOT / "examples/goal_reach"))
        import goal_reach

        if target == PLANTED:
            import tempfile

            src = (ROOT / "examples/goal_reach/goal_reach.h").read_text()
            anchor = "    const float ex = s.x[i] - s.goal_x[0];\n"
            assert anchor in src
            header = Path(tempfile.mkdtemp()) / "goal_reach.h"
            header.write_text(src.replace(anchor, "    if (i == 0) s.episode_return["
                                          "a.num_agents * 4096] = 1.0f;  // planted\n" + anchor))
            env = jaxwarp.build_env(goal_reach.SPEC, goal_reach.GoalReachParams(),
                                    backend=BACKEND, header=header)
            _obs, state = env.reset(jax.random.key(0), 3)
            a = env.action_space.sample(jax.random.key(1), (3, env.num_agents))
            jax.block_until_ready(env.step(jax.random.key(2), state, a))
            print("ran", target, flush=True)
            return

        for params, num_envs in MANY[GOAL_REACH]:
            env = jaxwarp.build_env(goal_reach.SPEC, goal_reach.GoalReachParams(
                **_short_episodes(goal_reach.GoalReachParams, params)),
                                    backend=BACKEND)
            run_env(env, num_envs)
            print("ran", target, params, num_envs, flush=True)
        return
    from jaxwarp.registry import _REGISTRY

    params_cls = _REGISTRY[target][1]
    cases = TAG_CASES if target == "tag_continuous" else MANY.get(target, SINGLE)
    for params, num_envs in cases:
        env = jaxwarp.make(target, backend=BACKEND, **_short_episodes(params_cls, params))
        run_env(env, num_envs)
        print("ran", target, params, num_envs, flush=True)


_SUMMARY = re.compile(r"(ERROR SUMMARY|RACECHECK SUMMARY): (\d+) (errors|hazards)")
_KERNEL = re.compile(r"^=========\s+at (.+?)(?:\+0x[0-9a-f]+)?(?: in .*)?$")


def _records(out: str) -> list[tuple[str, str]]:
    """(kernel, first line) of each report: a report opens with an unindented
    "========= Text" line, and its first "at KERNEL+0x.." line names the kernel."""
    recs: list[list[str]] = []
    for ln in out.splitlines():
        if not ln.startswith("========= "):
            continue
        body = ln[len("========= "):]
        if body and not body.startswith(" ") and not body.startswith(("ERROR SUMMARY",
                                                                       "RACECHECK SUMMARY",
                                                                       "COMPUTE-SANITIZER")):
            recs.append([body, ""])
        elif recs and not recs[-1][1] and (m := _KERNEL.match(ln)):
            recs[-1][1] = m.group(1)
    return [(k, first) for first, k in recs]


def _text(b: bytes | str | None) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


def sanitize(tool: str, target: str, exe: str, filter_args: list[str], env: dict,
             timeout: float) -> dict:
    """Runs one target under one tool. initcheck instruments every kernel: with
    a kernel filter it would not see XLA's kernels write the buffers ours read,
    and report those reads as uninitialized. Its reports are attributed to
    kernels, and only ours (names with "jaxwarp") count."""
    flt = [] if tool == "initcheck" else filter_args
    cmd = [exe, "--tool", tool, *flt, "--print-limit", "200", sys.executable,
           str(Path(__file__).resolve()), "--child", target]
    if tool == "racecheck":
        cmd[3:3] = ["--racecheck-report", "all"]  # hazards and analysis, all severities
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env,
                              cwd=ROOT, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        proc = subprocess.CompletedProcess(cmd, -9, _text(e.stdout), _text(e.stderr)
                                           + f"\nsanitize_kernels: timed out after {timeout} s")
    out = proc.stdout + proc.stderr
    counts = [int(m.group(2)) for m in _SUMMARY.finditer(out)]
    recs = _records(out)
    ours = [r for r in recs if "jaxwarp" in r[0]]
    ran = [ln for ln in proc.stdout.splitlines() if ln.startswith("ran ")]
    kernels = sorted({k for k, _ in ours})
    return {"tool": tool, "target": target, "returncode": proc.returncode,
            "summary_count": sum(counts) if counts else None,
            "reports_in_our_kernels": len(ours), "reports_in_other_kernels": len(recs) - len(ours),
            "our_kernels_reported": kernels, "cases_run": len(ran),
            "seconds": round(time.perf_counter() - t, 1),
            "first_reports": [f"{k}: {first}" for k, first in ours[:20]] or
            [f"{k}: {first}" for k, first in recs[:5]],
            "log": f"$ {' '.join(cmd)}\n{out}"}


def _clean(r: dict) -> bool:
    if r["tool"] == "initcheck":  # the summary also counts other kernels' reports
        return r["reports_in_our_kernels"] == 0 and r["cases_run"] > 0 and r["returncode"] >= 0
    return r["summary_count"] == 0 and r["returncode"] == 0 and r["cases_run"] > 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", help="run one target without the sanitizer (used internally)")
    ap.add_argument("--backend", default="cuda", help="with --child: cuda or cpu")
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--targets", default="", help="comma-separated; default: all")
    ap.add_argument("--jobs", type=int, default=8, help="sanitizer processes at once")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per sanitized process")
    ap.add_argument("--out", default="experiments/results/sanitize_kernels.json")
    args = ap.parse_args()
    if args.child:
        global BACKEND
        BACKEND = args.backend
        child(args.child)
        return
    exe = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not os.path.exists(exe):
        sys.exit("sanitize_kernels: compute-sanitizer not found (CUDA toolkit)")
    helptext = subprocess.run([exe, "--help"], check=False, capture_output=True,
                              text=True).stdout
    filter_args = (["--kernel-name", "kns=jaxwarp"] if "--kernel-name" in helptext
                   else ["--filter", "kns=jaxwarp"])
    env = dict(os.environ, XLA_PYTHON_CLIENT_ALLOCATOR="platform",
               XLA_PYTHON_CLIENT_PREALLOCATE="false",
               XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " --xla_gpu_enable_command_buffer=")
               .strip())
    names = args.targets.split(",") if args.targets else targets()
    tools = args.tools.split(",")

    # Build every env once, unsanitized (the sanitized children then load
    # from the cache instead of racing to compile).
    def plain(name: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, __file__, "--child", name], check=False, env=env,
                              cwd=ROOT, capture_output=True, text=True)

    with cf.ThreadPoolExecutor(args.jobs) as pool:
        for name, proc in zip(names, pool.map(plain, names)):
            if proc.returncode != 0:
                sys.exit(f"sanitize_kernels: {name} fails without the sanitizer:\n"
                         f"{proc.stdout[-2000:]}{proc.stderr[-4000:]}")
    # Slow tools first, so that the pool stays busy to the end.
    jobs = [(tool, name) for tool in sorted(tools, key=lambda t: t != "initcheck")
            for name in names]
    if "memcheck" in tools and not args.targets:
        jobs.append(("memcheck", PLANTED))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = {"device": None, "nvcc_flags": os.environ.get("JAXWARP_NVCC_FLAGS", ""),
               "filter": filter_args, "initcheck_filter": "none (every kernel instrumented)",
               "clean": None, "planted_write_caught": None, "planted": None, "results": []}
    logs = []
    with cf.ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(sanitize, *j, exe, filter_args, env, args.timeout) for j in jobs]
        for f in cf.as_completed(futures):
            r = f.result()
            logs.append(r.pop("log"))
            if r["target"] == PLANTED:
                summary["planted"] = r
                summary["planted_write_caught"] = (r["summary_count"] or 0) > 0
            else:
                summary["results"].append(r)
                print(f"{r['tool']:10s} {r['target']:30s} ours {r['reports_in_our_kernels']:5d} "
                      f"summary {r['summary_count']!s:>6s} rc {r['returncode']:3d} "
                      f"cases {r['cases_run']} {r['seconds']:.0f}s", flush=True)
            summary["clean"] = all(_clean(x) for x in summary["results"])
            # Written after every job: a killed run keeps what finished.
            out.write_text(json.dumps(summary, indent=1))
            out.with_suffix(".log").write_text("\n\n".join(logs))
    import jax

    summary["device"] = jax.devices()[0].device_kind
    from jaxwarp.benchmark import run_meta  # jax is imported late here (see above)

    summary["meta"] = run_meta()  # commit, command, device
    out.write_text(json.dumps(summary, indent=1))
    if summary["planted"] is not None:
        print("planted out-of-bounds write reported by memcheck:", summary["planted_write_caught"])
    print("ALL CLEAN" if summary["clean"] else "FINDINGS: see", out.with_suffix(".log"))


if __name__ == "__main__":
    main()
