"""Where the ``cuda_device_allocator.cc`` / ``cuda_status.cc`` lines seen
with ``jaxwarp train`` on the H100 come from (issue 37, item 3). Runs each
variant in its own process and reports the stderr lines that are not the
program's own (glog-style ``[IWEF]NNNN`` lines and anything naming CUDA),
then one JSON file. ``two_processes`` runs the CLI as two processes under
``jax.distributed`` on one host (the visible GPUs split between them, each
process using all of its half), the case where process 0 used to print gRPC
``CANCELLED`` traces after a clean run. Measured on one H100 (jax 0.11.2): a run alone, with or
without eval, prints none; the lines are XLA's failed attempts to
preallocate 75% of the GPU while another process holds part of it.

    python experiments/tools/exit_check.py --out $OUT/exit_check.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

TRAIN = ["train", "--config", "tag_small_cpu", "backend=cuda", "total_env_steps=19200",
         "chunk_updates=3", "checkpoint_every=3", "--no-progress"]
# Glog lines of XLA and anything CUDA-ish; the program's own output is not matched.
NOISE = re.compile(r"^[IWEF]\d{4} |cuda_|CUDA_ERROR|Traceback|CANCELLED|UNAVAILABLE")

# Holds the GPU as another jax process would (XLA preallocates 75% of it).
HOLDER = ("import time, jax, jax.numpy as jnp; x = jnp.ones(1000); x.block_until_ready(); "
          "print('ready', flush=True); time.sleep(600)")

VARIANTS = {
    # jax alone: does plain jax print the lines at exit?
    "jax_only": ([sys.executable, "-c",
                  "import jax, jax.numpy as jnp; f = jax.jit(lambda x: (x * 2).sum());"
                  " print(float(f(jnp.ones(1000))))"], {}),
    # jaxwarp's FFI libraries loaded, one cuda env reset and step
    "env_step": ([sys.executable, "-c",
                  "import jax, jax.numpy as jnp, jaxwarp; e = jaxwarp.make('mpe_simple_spread',"
                  " backend='cuda'); o, s = e.reset(jax.random.key(0), 64);"
                  " o, s, r, d, _ = e.step(jax.random.key(1), s, jnp.zeros((64, 3, 1),"
                  " jnp.int32)); print(float(r.sum()))"], {}),
    # the command, small
    "train_cli": ([sys.executable, "-m", "jaxwarp", *TRAIN], {}),
    "train_cli_no_eval": ([sys.executable, "-m", "jaxwarp", *TRAIN, "--eval-episodes", "0"], {}),
    # the CLI while another process holds the GPU (its memory preallocated)
    "train_beside_holder": ([sys.executable, "-m", "jaxwarp", *TRAIN], {"HOLD": "1"}),
    # ... with XLA's preallocation off (XLA_PYTHON_CLIENT_PREALLOCATE=false)
    "train_beside_holder_no_prealloc": ([sys.executable, "-m", "jaxwarp", *TRAIN],
                                        {"HOLD": "1", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}),
    # two processes under jax.distributed, the visible GPUs split between them
    "two_processes": ([sys.executable, "-m", "jaxwarp", *TRAIN], {"PROCS": "2"}),
}


def gpu_ids() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them."""
    seen = os.environ.get("CUDA_VISIBLE_DEVICES")
    if seen:
        return seen.split(",")
    out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.split()
    return out or ["0"]


def run_processes(cmd: list[str], env_extra: dict[str, str]) -> subprocess.CompletedProcess:
    """``cmd`` once, or as ``PROCS`` processes of one jax.distributed job.

    Several processes: each gets its share of the GPUs, stdout and stderr of
    process 0 first; the return code is the first non-zero one.
    """
    n = int(env_extra.get("PROCS", 1))
    env = {**os.environ, **{k: v for k, v in env_extra.items() if k != "PROCS"}}
    if n == 1:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    gpus, port = gpu_ids(), 20000 + os.getpid() % 10000
    share = max(1, len(gpus) // n)
    procs = [subprocess.Popen(
        cmd, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**env, "JAX_COORDINATOR_ADDRESS": f"localhost:{port}", "JAX_NUM_PROCESSES": str(n),
             "JAX_PROCESS_ID": str(i),
             "CUDA_VISIBLE_DEVICES": ",".join(gpus[i * share:(i + 1) * share] or gpus[:1])})
        for i in range(n)]
    outs = [p.communicate(timeout=300) for p in procs]
    rc = next((p.returncode for p in procs if p.returncode), 0)
    return subprocess.CompletedProcess(
        cmd, rc, "".join(f"[process {i}]\n{o}" for i, (o, _) in enumerate(outs)),
        "".join(f"[process {i}]\n{e}" for i, (_, e) in enumerate(outs)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", nargs="+", default=None)
    args = ap.parse_args()
    report = {"jax": None, "variants": {}}
    for name, (cmd, env_extra) in VARIANTS.items():
        if args.only and name not in args.only:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            if "train" in cmd:
                cmd = [*cmd, "--out", os.path.join(tmp, "run")]
            holder = None
            if env_extra.get("HOLD"):
                holder = subprocess.Popen([sys.executable, "-c", HOLDER], text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                holder.stdout.readline()  # "ready": its backend holds the GPU
            t = time.perf_counter()
            p = run_processes(cmd, env_extra)
            if holder is not None:
                holder.kill()
                holder.wait()
        noise = [ln for ln in p.stderr.splitlines() if NOISE.search(ln)]
        report["variants"][name] = {"rc": p.returncode, "seconds": time.perf_counter() - t,
                                    "noise": noise, "stderr_tail": p.stderr[-3000:]}
        print(f"== {name}: rc {p.returncode}, {len(noise)} noise lines "
              f"({time.perf_counter() - t:.0f} s)", flush=True)
        for ln in noise[:12]:
            print("   " + ln[:300], flush=True)
    import jax

    report["jax"] = jax.__version__
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
