"""Where the lines a GPU process prints at exit come from (issue 37, item 3:
``cuda_device_allocator.cc`` / ``cuda_status.cc`` after every ``jaxwarp
train`` on the H100). Runs each variant in its own process and reports the
stderr lines that are not the program's own (glog-style ``[IWEF]NNNN`` lines
and anything naming CUDA), then one JSON file.

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
NOISE = re.compile(r"^[IWEF]\d{4} |cuda_|CUDA_ERROR|Traceback")

WRAP = """
import gc, os, sys
import jax
from jaxwarp.cli import main
rc = main(sys.argv[1:])
mode = os.environ["EXIT_MODE"]
sys.stdout.flush(); sys.stderr.flush()
if mode == "os_exit":
    os._exit(rc)
if mode in ("teardown", "teardown_backends"):
    import jaxwarp
    jaxwarp._release_device_state()
    jax.config.update("jax_debug_leaked_clients_on_clear_backends", True)
    if mode == "teardown_backends":
        try:
            jax.clear_backends()
        except RuntimeError as e:
            print("exit_check: " + str(e), file=sys.stderr)
sys.exit(rc)
"""

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
    # the CLI, then os._exit: no interpreter teardown at all
    "train_os_exit": ([sys.executable, "-c", WRAP, *TRAIN], {"EXIT_MODE": "os_exit"}),
    # the CLI, then jaxwarp's caches of compiled functions released
    "train_teardown": ([sys.executable, "-c", WRAP, *TRAIN], {"EXIT_MODE": "teardown"}),
    # ... and the backends cleared with jax's leak check
    "train_teardown_backends": ([sys.executable, "-c", WRAP, *TRAIN],
                                {"EXIT_MODE": "teardown_backends"}),
}


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
            cmd = [c if c != "--no-progress" else c for c in cmd]
            if "train" in cmd:
                cmd = [*cmd, "--out", os.path.join(tmp, "run")]
            t = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                               env={**os.environ, **env_extra})
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
