"""Every copy in one compiled training update: the HLO `copy` / `copy-start`
instructions XLA keeps after optimisation outside fusions (each its own
memcpy or copy kernel), with the computation each runs
in (the update's body, the rollout's step loop, the minibatch loop, ...), its
shape and bytes, and the jax op it came from (the instruction's metadata).

A copy in a loop body runs once per iteration: the rollout's step loop
`num_steps` times per update, the minibatch loop epochs x minibatches times.
Device-to-device copies that no phase of `profile_phases.py` claims are these.

    python experiments/tools/copy_audit.py --config mpe_simple_spread_ppo \
        --set num_envs=16 num_steps=128 --out copies.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

import jax

from jaxwarp.benchmark import run_meta
from jaxwarp.train import build_trainer, load_config
from jaxwarp.train.compile import jit

_BYTES = {"f32": 4, "s32": 4, "u32": 4, "bf16": 2, "f16": 2, "pred": 1, "s8": 1, "u8": 1,
          "f64": 8, "s64": 8, "u64": 8}
# Opcodes that only move data: a fusion of nothing else is a copy kernel or,
# on XLA:GPU, a memcpy (a contiguous slice or update becomes one).
_MOVE = {"parameter", "slice", "dynamic-slice", "dynamic-update-slice", "copy", "bitcast",
         "reshape", "transpose", "concatenate", "constant", "tuple", "get-tuple-element",
         "broadcast", "pad", "copy-start", "copy-done", "bitcast-convert"}
_COMP = re.compile(r"^(ENTRY )?%?([\w.\-]+) \(.*\{\s*$")
_OP = re.compile(r"^\s*(?:ROOT )?%?(\S+) = \(?([a-z0-9]+)\[([\d,]*)\]\S* ([a-z\-]+)\(")
_CALLS = re.compile(r"calls=%?([\w.\-]+)")


def _bytes(dtype: str, dims: str) -> int:
    n = 1
    for d in filter(None, dims.split(",")):
        n *= int(d)
    return n * _BYTES.get(dtype, 4)


def _computations(hlo: str) -> dict[str, list[tuple[str, str, str, str, str]]]:
    """computation name -> its instructions (name, dtype, dims, opcode, line)."""
    comps: dict[str, list] = {}
    cur = None
    for line in hlo.splitlines():
        if (m := _COMP.match(line)) and " = " not in line.split("(")[0]:
            cur = m.group(2)
            comps[cur] = []
        elif cur is not None and (m := _OP.match(line)):
            comps[cur].append((*m.groups(), line))
    return comps


def copies(hlo: str) -> list[dict]:
    """The data movement of an optimised HLO module that runs as kernels of its
    own: copy / dynamic-slice / dynamic-update-slice instructions outside
    fusions, and fusions whose body only moves data (slices, updates, copies,
    transposes; on XLA:GPU a contiguous one is a memcpy)."""
    comps = _computations(hlo)
    fused = {m.group(1) for ops in comps.values() for *_, line in ops
             if " fusion(" in line and (m := _CALLS.search(line))}
    out = []
    for comp, ops in comps.items():
        if comp in fused:
            continue
        for name, dtype, dims, opcode, line in ops:
            what = None
            if opcode in ("copy", "copy-start", "dynamic-slice", "dynamic-update-slice"):
                what = opcode
            elif opcode == "fusion" and (body := _CALLS.search(line)):
                kinds = {o[3] for o in comps.get(body.group(1), [])}
                if kinds and kinds <= _MOVE:
                    what = "fusion:" + "+".join(sorted(kinds - {"parameter", "constant",
                                                                 "tuple", "bitcast"}))
            if what is None:
                continue
            op = re.search(r'op_name="([^"]*)"', line)
            out.append({"computation": comp, "instruction": name, "kind": what, "dtype": dtype,
                        "shape": [int(d) for d in filter(None, dims.split(","))],
                        "bytes": _bytes(dtype, dims), "op_name": op.group(1) if op else None})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="mpe_simple_spread_ppo")
    ap.add_argument("--set", nargs="*", default=[], help="key=value overrides")
    ap.add_argument("--updates", type=int, default=2, help="updates in the compiled scan")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    config = load_config(args.config, args.set)
    trainer = build_trainer(config)
    state = jax.jit(trainer.init)(jax.random.PRNGKey(0))
    run = jit(lambda s: trainer.run(s, args.updates), config.deterministic, donate_argnums=0)
    hlo = run.lower(state).compile().as_text()
    rows = copies(hlo)
    by_comp = Counter()
    for r in rows:
        by_comp[r["computation"]] += r["bytes"]
    print(f"{len(rows)} copies, {sum(r['bytes'] for r in rows) / 1e6:.2f} MB (each once); "
          f"by computation:")
    for comp, b in by_comp.most_common():
        print(f"  {b / 1e6:9.3f} MB  {comp}")
    for r in sorted(rows, key=lambda r: -r["bytes"])[:25]:
        print(f"  {r['bytes'] / 1e6:9.3f} MB {r['kind']:28s} {r['dtype']}{r['shape']} in "
              f"{r['computation']}: {r['op_name']}")
    if args.out:
        args.out.write_text(json.dumps({"meta": run_meta(), "config": args.config,
                                        "overrides": args.set, "copies": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
