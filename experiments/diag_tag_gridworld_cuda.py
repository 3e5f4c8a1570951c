"""Diagnostic for a CUDA miscompilation met in tag_gridworld: the generated
CUDA kernels against the pure-JAX reference, per variant of the move code.

Each variant is the shipped header with the move (action -> dx, dy) written
differently; the build flags come from the environment, so the same script
runs under `JAXWARP_NVCC_FLAGS="-Xptxas -O0"` or `CUDA_FORCE_PTX_JIT=1`
(driver JIT from the embedded PTX instead of the sm_90 SASS). It calls the
generated bindings directly (authoring.ContractEnv) and prints one JSON line
per variant, with wrong moves counted per action.

Found on an H100 with nvcc 13.0 (experiments/results/
diag_tag_gridworld_cuda_h100.jsonl): "arith" (dy = (m == 3) - (m == 4)) moves
agents one extra cell down at the default level and under the driver JIT, and
is right at -Xptxas -O0; the shipped switch is right under all three. The
XLA:CPU build of every variant matches the reference (--backend cpu).

    python experiments/diag_tag_gridworld_cuda.py [--label NAME] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp.authoring import ContractEnv
from jaxwarp.envs.tag_gridworld import SPEC, TagGridworldParams

HEADER = Path(SPEC.header)
SWITCH_START = "    int32_t dx = 0, dy = 0;"
SWITCH_END = "    const int32_t nx"

MOVES = {
    "switch": None,  # the header as shipped
    "arith": "    const int32_t dx = (m == 1 ? 1 : 0) - (m == 2 ? 1 : 0);\n"
             "    const int32_t dy = (m == 3 ? 1 : 0) - (m == 4 ? 1 : 0);\n",
    "unclamped_switch": None,  # switch on the raw action (tests the clamp's part)
}


def variant_header(name: str, tmp: Path) -> Path:
    text = HEADER.read_text()
    if name == "unclamped_switch":
        text = text.replace("const int32_t m = a0 < 0 ? 0 : (a0 > 4 ? 4 : a0);",
                            "const int32_t m = a0;")
    elif MOVES[name] is not None:
        i, j = text.index(SWITCH_START), text.index(SWITCH_END)
        text = text[:i] + MOVES[name] + text[j:]
    d = tmp / name
    d.mkdir()
    (d / HEADER.name).write_text(text)
    return d / HEADER.name


def run(header: Path, backend: str = "cuda", steps: int = 40, envs: int = 64) -> dict:
    kw = dict(num_taggers=3, grid_length=5, episode_length=25, use_full_observation=False,
              random_start=True)
    p = TagGridworldParams(**kw)
    envs_ = {"cuda": ContractEnv(SPEC, p, backend=backend, header=header),
             "jax": ContractEnv(SPEC, p, backend="jax")}
    gpu = jax.devices("gpu" if backend == "cuda" else "cpu")[0]
    reset = {b: jax.jit(e.reset, static_argnums=1) for b, e in envs_.items()}
    step = {b: jax.jit(e.step) for b, e in envs_.items()}
    key = jax.random.PRNGKey(0)
    with jax.default_device(gpu):
        st = {b: reset[b](key, envs)[1] for b in envs_}
        first = None
        bad_steps = 0
        by_action = {a: [0, 0] for a in range(5)}  # action -> [agents moved wrongly, agents]
        for t in range(steps):
            k1, k2 = jax.random.split(jax.random.fold_in(key, t + 1))
            acts = jax.random.randint(k1, (envs, kw["num_taggers"] + 1, 1), 0, 5, jnp.int32)
            prev = st["jax"]
            out = {b: step[b](k2, st[b], acts) for b in envs_}
            xc, yc = np.asarray(out["cuda"][1].x), np.asarray(out["cuda"][1].y)
            xj, yj = np.asarray(out["jax"][1].x), np.asarray(out["jax"][1].y)
            wrong = (xc != xj) | (yc != yj)
            a = np.asarray(acts)[..., 0]
            for v in range(5):
                by_action[v][0] += int(wrong[a == v].sum())
                by_action[v][1] += int((a == v).sum())
            if wrong.any():
                bad_steps += 1
                if first is None:
                    e, i = map(int, np.argwhere(wrong)[0])
                    first = dict(step=t, env=e, agent=i, action=int(a[e, i]),
                                 before=[int(prev.x[e, i]), int(prev.y[e, i])],
                                 cuda=[int(xc[e, i]), int(yc[e, i])],
                                 jax=[int(xj[e, i]), int(yj[e, i])])
            st = {b: out[b][1] for b in envs_}
            # Both continue from the reference state, so one fault does not compound.
            st["cuda"] = jax.tree_util.tree_map(lambda x: x + 0, st["jax"])
    return dict(bad_steps=bad_steps, steps=steps, first=first,
                wrong_by_action={v: f"{w}/{n}" for v, (w, n) in by_action.items()})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--label", default="default")
    ap.add_argument("--out", default=None, help="append JSON lines here")
    ap.add_argument("--backend", default="cuda", help="cpu checks the script itself")
    args = ap.parse_args()
    flags = dict(JAXWARP_NVCC_FLAGS=os.environ.get("JAXWARP_NVCC_FLAGS", ""),
                 CUDA_FORCE_PTX_JIT=os.environ.get("CUDA_FORCE_PTX_JIT", ""))
    with tempfile.TemporaryDirectory() as tmp:
        for name in MOVES:
            res = dict(label=args.label, variant=name, **flags, **run(variant_header(name, Path(tmp)), args.backend))
            line = json.dumps(res)
            print(line, flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(line + "\n")


if __name__ == "__main__":
    main()
