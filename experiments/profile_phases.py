"""One training update, by phase: device time, matmul FLOPs and bytes moved
against the GPU's rooflines.

The trainer names its phases with `jax.named_scope` (rollout, gae, minibatch,
forward, backward, optimizer, obs_stats); every device kernel of a
`jax.profiler` trace is attributed to the phase in the `op_name` metadata of
the HLO instruction that launched it, and every instruction's bytes are its
operands plus its result as the optimised HLO types them (a fusion reads each
operand once and writes its result once: a lower bound on traffic). Matmul
FLOPs come from the jaxpr (2 x M x N x K per dot_general, scan bodies times
their length), by the same scopes. Run it with command buffers off (as
below): kernels captured in a CUDA graph carry the graph's name, not their
instruction's. A phase's floor is max(FLOPs / matmul
peak, bytes / copy bandwidth); the table shows how far each phase is from it.

    XLA_FLAGS=--xla_gpu_enable_command_buffer= \\
    python experiments/profile_phases.py --config tag_warpdrive_default \
        num_envs=2000 num_steps=50 num_minibatches=10 \
        policies.tagger.dtype=bfloat16 policies.runner.dtype=bfloat16 \
        --out experiments/results/profile_phases_a2c_bf16_h100.json
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
import tempfile
from pathlib import Path

import jax
import numpy as np

from jaxwarp.benchmark import PEAK_TFLOPS, _sub_jaxprs
from jaxwarp.train import build_trainer, jit, load_config

PHASES = ("rollout", "gae", "minibatch", "forward", "backward", "optimizer", "obs_stats",
          "collective")
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4,
          "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8}
_SHAPE = re.compile(r"\b(pred|[suf]\d+|bf16)\[([\d,]*)\]")


def phase_of(op_name: str) -> str:
    """The phase an op belongs to by its name stack (the innermost named
    phase wins, except that a transposed (backward) op of a forward scope is
    backward)."""
    if "rollout" in op_name:
        return "rollout"
    for p in ("gae", "obs_stats", "optimizer", "minibatch", "backward"):
        if p in op_name:
            return p
    if "transpose(" in op_name:
        return "backward"
    if "forward" in op_name:
        return "forward"
    return "other"


def _shape_bytes(text: str) -> int:
    total = 0
    for dtype, dims in _SHAPE.findall(text):
        n = int(np.prod([int(d) for d in dims.split(",") if d])) if dims else 1
        total += n * _BYTES.get(dtype, 4)
    return total


def hlo_instructions(hlo: str) -> dict[str, dict]:
    """instruction name -> {"op_name", "bytes"} of every instruction in the
    optimised HLO text: bytes = what it reads plus what it writes, from the
    shapes (operands are printed by name: their shapes come from their own
    definitions). A fusion operand that its fused computation only slices
    counts as the slices; a fusion whose root updates an operand in place
    (dynamic-update-slice) counts the update, not the whole buffer."""
    defs: dict[str, tuple[str, int, list[str], str]] = {}
    comps: dict[str, dict] = {}  # fused computation -> params read size, in-place param
    comp, params, users, root = None, {}, {}, None
    for line in hlo.splitlines():
        head = re.match(r"%([\w.\-]+) \(.*\{\s*$", line)
        if head:
            comp, params, users, root = head.group(1), {}, {}, None
            continue
        if line.startswith("}") and comp is not None:
            read = {}
            for pname, (idx, size) in params.items():
                us = users.get(pname, [])
                sliced = us and all(op in ("slice", "dynamic-slice") for op, _ in us)
                read[idx] = sum(b for _, b in us) if sliced else size
            inplace = None
            if root and root[0] == "dynamic-update-slice" and root[2] and root[2][0] in params:
                inplace = (params[root[2][0]][0], root[3])  # (param index, update bytes)
            comps[comp] = {"read": read, "inplace": inplace}
            comp = None
            continue
        m = re.match(r"\s*(ROOT )?%([\w.\-]+) = (.*)$", line)
        if not m:
            continue
        is_root, name, rest = m.groups()
        op = re.search(r'op_name="([^"]*)"', rest)
        body = rest.split(", metadata=")[0]
        cut = body.find("%")
        result = body if cut < 0 else body[:cut]
        opcode = result.strip().split(" ")[-1].rstrip("(") if cut >= 0 else ""
        operands = re.findall(r"%([\w.\-]+)", body.split("calls=")[0])
        size = _shape_bytes(result)
        if comp is not None:
            pm = re.search(r"parameter\((\d+)\)", rest)
            if pm:
                params[name] = (int(pm.group(1)), size)
            for o in operands:
                users.setdefault(o, []).append((opcode, size))
            if is_root:
                upd = defs.get(operands[1], ("", 0))[1] if len(operands) > 1 else 0
                root = (opcode, name, operands, upd)
        calls = re.search(r"calls=%([\w.\-]+)", rest)
        defs[name] = (op.group(1) if op else "", size, operands, calls.group(1) if calls else "")
    out = {}
    for name, (op, own, operands, called) in defs.items():
        info = comps.get(called)
        if info is None:
            total = own + sum(defs[o][1] for o in operands if o in defs)
        else:
            total = sum(info["read"].get(i, defs[o][1] if o in defs else 0)
                        for i, o in enumerate(operands))
            if info["inplace"] is not None:
                i, upd = info["inplace"]
                total += 2 * upd - info["read"].get(i, 0)  # read + write the update only
            else:
                total += own
        out[name] = {"op_name": op, "bytes": total}
    return out


def flops_by_phase(jaxpr, prefix: str = "", times: float = 1.0,
                   out: dict[str, float] | None = None) -> dict[str, float]:
    """Matmul FLOPs by phase (name stacks of the jaxpr's equations)."""
    out = collections.defaultdict(float) if out is None else out
    for eqn in jaxpr.eqns:
        stack = f"{prefix}/{eqn.source_info.name_stack}"
        name = eqn.primitive.name
        if name == "dot_general":
            lhs, rhs = (v.aval for v in eqn.invars)
            (_, rc), (_, rb) = eqn.params["dimension_numbers"]
            free = [d for i, d in enumerate(rhs.shape) if i not in rc and i not in rb]
            out[phase_of(stack)] += times * 2.0 * float(np.prod(lhs.shape)) * float(
                np.prod(free))
            continue
        n = float(eqn.params.get("length", 1)) if name == "scan" else 1.0
        for v in eqn.params.values():
            for j in _sub_jaxprs(v):
                flops_by_phase(j, stack, times * n, out)
    return out


def device_events(trace_dir: Path) -> list[dict]:
    """The trace's kernel events on GPUs, each with ``gpu``: the index of the
    GPU it ran on (from its process name, e.g. ``/device:GPU:2``)."""
    files = sorted(trace_dir.rglob("perfetto_trace.json.gz")) or sorted(
        trace_dir.rglob("*.trace.json.gz"))
    with gzip.open(files[-1]) as f:
        events = json.loads(f.read())
    events = events["traceEvents"] if isinstance(events, dict) else events
    pids = {e["pid"]: e["args"]["name"] for e in events
            if e.get("ph") == "M" and e.get("name") == "process_name"}
    out = []
    for e in events:
        name = pids.get(e.get("pid"), "")
        if e.get("ph") == "X" and "GPU" in name:
            m = re.search(r"GPU:(\d+)", name)
            out.append(dict(e, gpu=int(m.group(1)) if m else 0))
    return out


def per_gpu(events: list[dict], updates: int) -> list[dict]:
    """Each GPU's kernel time and span (first kernel's start to last kernel's
    end) per update, and its collectives' share: a collective's kernel spins
    while it waits for the other GPUs, so its time holds their skew too."""
    rows = []
    for g in sorted({e["gpu"] for e in events}):
        ev = [e for e in events if e["gpu"] == g]
        busy = sum(e.get("dur", 0) for e in ev)
        coll = sum(e.get("dur", 0) for e in ev if _is_collective(e.get("name", "")))
        span = max(e["ts"] + e.get("dur", 0) for e in ev) - min(e["ts"] for e in ev)
        rows.append({"gpu": g, "kernel_ms": busy / 1e3 / updates,
                     "span_ms": span / 1e3 / updates,
                     "collective_ms": coll / 1e3 / updates, "kernels": len(ev) // updates})
    return rows


def _is_collective(kernel: str) -> bool:
    return "nccl" in kernel.lower()


def _hlo_op(event: dict, instr: dict[str, dict]) -> str:
    """The HLO instruction that launched a kernel event: its ``hlo_op`` (a
    kernel launched on its own), or its kernel name for an XLA fusion
    (``input_reduce_fusion_3`` is instruction ``input_reduce_fusion.3``)."""
    op = str(event.get("args", {}).get("hlo_op", ""))
    if op in instr:
        return op
    name = event.get("name", "")
    for cand in (name, re.sub(r"_(\d+)$", r".\1", name)):
        if cand in instr:
            return cand
    return op


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("overrides", nargs="*")
    ap.add_argument("--config", default="tag_warpdrive_default")
    ap.add_argument("--updates", type=int, default=2)
    ap.add_argument("--bandwidth", type=float, default=3.0e12,
                    help="copy bandwidth in bytes/s (measured on the device; H100 ~3.0e12)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--hlo", default=None, help="also write the optimised HLO (gzip) here")
    ap.add_argument("--top", type=int, default=15,
                    help="kernels per phase listed with their bytes and floor")
    args = ap.parse_intermixed_args()
    trainer = build_trainer(load_config(args.config, args.overrides))
    state = jax.jit(trainer.init)(jax.random.PRNGKey(0))
    run = jit(lambda s: trainer.run(s, args.updates), donate_argnums=0).lower(state).compile()
    hlo = run.as_text()
    if args.hlo:
        Path(args.hlo).write_bytes(gzip.compress(hlo.encode()))
    instr = hlo_instructions(hlo)
    jaxpr = jax.make_jaxpr(lambda s: trainer.run(s, 1))(state).jaxpr
    flops = flops_by_phase(jaxpr)
    state, m = run(state)
    jax.block_until_ready((state, m))
    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp, create_perfetto_trace=True):
            state, m = run(state)
            jax.block_until_ready((state, m))
        events = device_events(Path(tmp))
    gpus = max(1, len({e["gpu"] for e in events}))
    ms = collections.defaultdict(float)
    nbytes = collections.defaultdict(float)
    kernels = collections.defaultdict(lambda: collections.defaultdict(float))
    kbytes = collections.defaultdict(lambda: collections.defaultdict(float))
    unmatched = 0
    for e in events:
        op = _hlo_op(e, instr)
        info = instr.get(op)
        if info is None:
            unmatched += 1
        phase = phase_of(info["op_name"]) if info else "unattributed"
        if _is_collective(e.get("name", "")):
            phase = "collective"
        # per GPU: the mean over the GPUs the program ran on
        ms[phase] += e.get("dur", 0) / 1e3 / args.updates / gpus
        nbytes[phase] += (info["bytes"] if info else 0) / args.updates / gpus
        kname = e.get("name", "?")[:60]
        kernels[phase][kname] += e.get("dur", 0) / 1e3 / args.updates / gpus
        kbytes[phase][kname] += (info["bytes"] if info else 0) / args.updates / gpus
    if events and unmatched > len(events) // 2:  # show what the trace carries
        print("unmatched events, e.g.:", [(e.get("name"), e.get("args")) for e in events[:3]])
    kind = jax.devices()[0].device_kind
    dtype = trainer.config.policy(next(iter(trainer.groups))).dtype
    peak = PEAK_TFLOPS.get(kind, {}).get(str(np.dtype(dtype)), 0.0) * 1e12
    total_ms = sum(ms.values())
    rows = []
    for p in (*PHASES, "other", "unattributed"):
        if ms.get(p, 0) == 0 and flops.get(p, 0) == 0:
            continue
        f, b, t = flops.get(p, 0.0), nbytes.get(p, 0.0), ms.get(p, 0.0)
        floor_ms = 1e3 * max(f / peak if peak else 0.0, b / args.bandwidth)
        listed = sorted(kernels[p].items(), key=lambda kv: -kv[1])
        top, listed = listed[:6], listed[:args.top]
        rows.append({"phase": p, "ms": t, "share": t / total_ms if total_ms else 0.0,
                     "matmul_tflop": f / 1e12, "gbytes": b / 1e9, "floor_ms": floor_ms,
                     "top_kernels": [[k, v] for k, v in top],
                     # [name, ms, GB moved (HLO shapes), ms at the copy bandwidth]
                     "kernels": [[k, v, kbytes[p][k] / 1e9,
                                  1e3 * kbytes[p][k] / args.bandwidth] for k, v in listed]})
    d = trainer.derived
    print(f"{kind}: {trainer.config.env} {trainer.config.algorithm}, {d.batch_env_steps} "
          f"env-steps per update; device time {total_ms:.1f} ms per update per GPU; "
          f"{unmatched} of {len(events)} kernel events without an HLO match")
    print(f"{'phase':13s} {'ms':>8s} {'share':>6s} {'TFLOP':>7s} {'GB':>7s} {'floor ms':>9s}")
    for r in rows:
        print(f"{r['phase']:13s} {r['ms']:8.2f} {100 * r['share']:5.1f}% "
              f"{r['matmul_tflop']:7.2f} {r['gbytes']:7.2f} {r['floor_ms']:9.2f}")
        for k, v in r["top_kernels"][:3]:
            print(f"{'':15s}{v:7.2f} ms  {k}")
    gpu_rows = per_gpu(events, args.updates) if events else []
    for g in gpu_rows:
        print(f"GPU {g['gpu']}: kernels {g['kernel_ms']:.1f} ms, span {g['span_ms']:.1f} ms, "
              f"collectives {g['collective_ms']:.2f} ms, {g['kernels']} kernels per update")
    if args.out:
        from jaxwarp.benchmark import run_meta
        Path(args.out).write_text(json.dumps({
            "meta": run_meta(), "config": args.config,
            "overrides": args.overrides, "bandwidth": args.bandwidth, "peak_flops": peak,
            "ms_per_update": total_ms, "phases": rows, "gpus": gpu_rows}, indent=1))


if __name__ == "__main__":
    main()
