"""Where a training update spends its GPU time: a jax.profiler trace of
`trainer.run` for one shipped config, summarised as the top device ops.

    python experiments/profile_train.py --config tag_warpdrive_default \
        num_envs=2000 num_steps=50 num_minibatches=10 --out /tmp/prof
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
from pathlib import Path

import jax

from jaxwarp.benchmark import matmul_flops, model_flops_utilization
from jaxwarp.train import build_trainer, load_config


def summarise(trace_dir: Path, top: int) -> list[tuple[str, float, int]]:
    """(name, total ms, count) of the longest device events in a perfetto trace."""
    files = sorted(trace_dir.rglob("perfetto_trace.json.gz")) or sorted(
        trace_dir.rglob("*.json.gz"))
    events = json.loads(gzip.open(files[-1]).read())
    events = events["traceEvents"] if isinstance(events, dict) else events
    pids = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            pids[e["pid"]] = e["args"]["name"]
    total: dict[str, float] = collections.defaultdict(float)
    count: dict[str, int] = collections.Counter()
    for e in events:
        if e.get("ph") == "X" and "GPU" in pids.get(e.get("pid"), ""):
            total[e["name"]] += e.get("dur", 0) / 1e3
            count[e["name"]] += 1
    rows = sorted(total.items(), key=lambda kv: -kv[1])[:top]
    return [(n, ms, count[n]) for n, ms in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("overrides", nargs="*")
    ap.add_argument("--config", default="tag_warpdrive_default")
    ap.add_argument("--updates", type=int, default=2)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--out", default="/tmp/jaxwarp_profile")
    ap.add_argument("--hlo", default=None,
                    help="also write the compiled program's optimised HLO here (fusion names)")
    args = ap.parse_args()
    trainer = build_trainer(load_config(args.config, args.overrides))
    state = jax.jit(trainer.init)(jax.random.PRNGKey(0))
    run = jax.jit(lambda s: trainer.run(s, args.updates), donate_argnums=0).lower(state).compile()
    if args.hlo:
        Path(args.hlo).write_text(run.as_text())
    state, m = run(state)
    jax.block_until_ready((state, m))
    out = Path(args.out)
    with jax.profiler.trace(str(out), create_perfetto_trace=True):
        state, m = run(state)
        jax.block_until_ready((state, m))
    rows = summarise(out, args.top)
    all_ms = sum(ms for _, ms, _ in summarise(out, 10**9))
    print(f"device time {all_ms:.1f} ms for {args.updates} updates")
    flops = matmul_flops(lambda s: trainer.run(s, 1), state)
    total = sum(flops.values())
    line = f"matmul FLOPs per update {total / 1e12:.2f} T ({', '.join(sorted(flops))})"
    if all_ms > 0:  # a CPU-only trace has no device events
        sec = all_ms / 1e3 / args.updates
        mfu = model_flops_utilization(flops, sec, jax.devices()[0].device_kind)
        line += (f"; over the device time {total / sec / 1e12:.1f} TFLOP/s, "
                 f"MFU {'n/a' if mfu is None else f'{100 * mfu:.1f}%'}")
    print(line)
    for name, ms, n in rows:
        print(f"{ms:9.2f} ms {100 * ms / all_ms:5.1f}% {n:6d}x  {name[:110]}")


if __name__ == "__main__":
    main()
