"""Tag (continuous) on the H100: kernel variants side by side in one process
(the choice of observation path, of shared-memory budgets in
cuda/jaxwarp_kernels.h and of the neighbour search in cuda/jaxwarp_team.h
rests on this). Results before the hand-written Tag kernel was deleted list it
as the first variant.

Each variant builds the contract env with JAXWARP_NVCC_FLAGS set to its
-D overrides of JAXWARP_OBS_BUDGET / JAXWARP_STAGING_BUDGET (the build cache
keys on them, so the variants coexist), then times it as
experiments/bench_tag_paths.py does (protocol and hashed actions).

    python experiments/tune_tag_layout.py --out experiments/results/tune_tag_layout_h100.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jax

from bench_tag_paths import make_env, time_env  # same folder
from envvars import env_vars  # same folder

from jaxwarp import authoring
from jaxwarp.envs import tag_continuous as tc

# Variant sets: -D overrides of the layout budgets (JAXWARP_OBS_BUDGET,
# JAXWARP_STAGING_BUDGET) and of the kernel switches in cuda/jaxwarp_kernels.h.
VARIANT_SETS = {
    "obs": {
        "rows, one pass (48 KiB)": "-DJAXWARP_OBS_BUDGET=49152",
        "rows, 2 passes (16 KiB, default)": "",
        "rows, 4 passes (9 KiB)": "-DJAXWARP_OBS_BUDGET=9216",
        "parts (no rows)": "-DJAXWARP_OBS_BUDGET=0",
    },
    "kernel": {
        "default": "",
        "no stationary parts": "-DJAXWARP_STATIONARY_PARTS=0",
        "no early copy-out": "-DJAXWARP_EARLY_COPY_OUT=0",
        "no warp scan in the grid build": "-DJAXWARP_WARP_SCAN=0",
        "up to 1024 threads per env": "-DJAXWARP_MAX_THREADS=1024",
        "none of these": "-DJAXWARP_STATIONARY_PARTS=0 -DJAXWARP_EARLY_COPY_OUT=0 "
                         "-DJAXWARP_WARP_SCAN=0",
    },
    # (tune_search_large_h100.json compared neighbour-search variants whose
    # switches were removed once measured: pruned cells, Tag's cells for all
    # agents, a one-compare insert.)
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="warpdrive_default")
    ap.add_argument("--envs", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--set", default="obs", choices=sorted(VARIANT_SETS))
    ap.add_argument("--only", default="", help="comma-separated variant names of the set")
    ap.add_argument("--out", default="experiments/results/tune_tag_layout.json")
    args = ap.parse_args()
    rows = []
    variants = VARIANT_SETS[args.set]
    if args.only:
        wanted = args.only.split(",")
        unknown = [v for v in wanted if v not in variants]
        if unknown:
            ap.error(f"--only: unknown variants {unknown}; the set has {list(variants)}")
        variants = {k: variants[k] for k in wanted}
    for name, flags in variants.items():
        with env_vars(JAXWARP_NVCC_FLAGS=flags):  # the build reads it, as does launch_layout's
            env = make_env("contract", args.config)
            lay = authoring.launch_layout(tc.SPEC, env.params, "cuda")
        layout = {k: int(getattr(lay, k)) for k in ("tpe", "epb", "staged", "obs_staged",
                                                    "words", "smem_bytes")}
        for protocol in (True, False):
            r = time_env(env, args.envs, args.steps, protocol, args.repeats)
            r.update(variant=name, flags=flags, layout=layout, config=args.config,
                     num_envs=args.envs, protocol=protocol)
            rows.append(r)
            print(f"{args.config} {name:26s} {'protocol' if protocol else 'hashed  '} "
                  f"{r['env_steps_per_s'] / 1e6:7.2f} M env-steps/s  layout {layout}", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dict(device=jax.devices()[0].device_kind, results=rows), indent=1))


if __name__ == "__main__":
    main()
