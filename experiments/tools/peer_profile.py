"""Where one update of jaxwarp's trainer and one of the peer's spend their time,
at one case and scale of `bench_time_to_return.py`, in one process on one GPU
(the Tag duel's peer: the same trainer on the pure-JAX `jax` backend).

Both programs are what that benchmark runs (``jax.jit(jax.vmap(train))`` over
``--seeds`` keys), shortened to ``--updates`` updates: each is compiled, run
once, then timed over a second run (wall clock, seconds per update) and traced
once with `jax.profiler` (device kernels: time and count per update, the
longest kernels by name; jaxwarp's also by the trainer's phases, as
`profile_phases.py` attributes them). Variants of jaxwarp's run (``--variant
NAME KEY=VALUE ...``) add config overrides or, with ``@step_by_step``, keep the
step-by-step rollout where the fused one would run (`fused.why_not` patched:
the comparison lives here, not in the package).

    XLA_FLAGS=--xla_gpu_enable_command_buffer= \\
    python experiments/tools/peer_profile.py --case cartpole --scale gpu \\
        --variant default --variant envs minibatch_layout=envs --out peer_profile.json

With command buffers on (XLA's default) the wall times are the benchmark's; the
phase attribution needs them off (kernels in a CUDA graph carry the graph's name).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_time_to_return as ttr  # noqa: E402
import profile_phases as pp  # noqa: E402

from jaxwarp.benchmark import run_meta  # noqa: E402
from jaxwarp.train.compile import (  # noqa: E402
    COMPILER_OPTIONS, DETERMINISTIC_OPTIONS, compiler_options)


def _jaxwarp_train(case: str, hp: dict, overrides: list[str], backend: str):
    train, trainer, _ = ttr.jaxwarp_train(case, hp, backend, 0, overrides)
    return train, {"rollout": trainer.rollout_path,
                   "model_layers": dict(trainer.model_layers or {})}


def _flat_optimisers(c, d, groups):
    """`optim.optimisers` with every group's transformation over its raveled
    parameters (independent critics only: MAPPO's two optimisers split a tree)."""
    import optax

    from jaxwarp.train import optim

    base = optim.optimisers(c, d, groups)
    if c.critic == "centralised":
        raise SystemExit("peer_profile.py: error: @flat_adam needs critic != centralised")
    return {g: (lambda hyper, f=f: optax.flatten(f(hyper))) for g, f in base.items()}


_OPTIONS = {"@product_jit": compiler_options(True), "@cublas": COMPILER_OPTIONS,
            "@deterministic": DETERMINISTIC_OPTIONS,
            # cuBLAS's legacy API for the dots (no cuBLASLt split-K reductions)
            "@no_cublaslt": {"xla_gpu_enable_cublaslt": False}}


def _options(extra: list[str] | None) -> dict | None:
    """The XLA options of the variant's compile markers (None: plain jax.jit)."""
    marks = [m for m in extra or [] if m in _OPTIONS]
    return {k: v for m in marks for k, v in _OPTIONS[m].items()} or None


def _patches(extra: list[str] | None) -> list[tuple[object, str, object]]:
    """(module, attribute, replacement) for the variant's ``@`` markers."""
    import gru_scan_variants

    from jaxwarp.models import recurrent
    from jaxwarp.train import fused, minibatches, trainer

    marks = {e for e in extra or [] if e.startswith("@")}
    known = {"@step_by_step", "@flat_adam", "@no_shuffle", *_OPTIONS,
             *gru_scan_variants.VARIANTS}
    if marks - known:
        raise SystemExit(f"peer_profile.py: error: unknown variant markers {sorted(marks - known)}"
                         f"; expected some of {sorted(known)}")
    out = []
    if "@step_by_step" in marks:
        out.append((fused, "why_not", lambda *a, **kw: "step by step (peer_profile.py's variant)"))
    if "@flat_adam" in marks:
        out.append((trainer, "optimisers", _flat_optimisers))
    if "@no_shuffle" in marks:
        out.append((minibatches.jax.random, "permutation",
                    lambda key, n, *a, **kw: jax.numpy.arange(n)))
    for mark in marks & set(gru_scan_variants.VARIANTS):
        out.append((recurrent, "gru_scan", gru_scan_variants.VARIANTS[mark]))
    return out


def measure(fn, keys, updates: int, phases: bool, hlo: Path | None = None,
            options: dict | None = None) -> dict:
    """Seconds per update (second run) and the traced device kernels of a third."""
    compiled = jax.jit(jax.vmap(fn), compiler_options=options).lower(keys).compile()
    jax.block_until_ready(compiled(keys))
    t0 = time.perf_counter()
    jax.block_until_ready(compiled(keys))
    wall = (time.perf_counter() - t0) / updates
    text = compiled.as_text()
    if hlo is not None:
        hlo.parent.mkdir(parents=True, exist_ok=True)
        hlo.write_bytes(gzip.compress(text.encode()))
    instr = pp.hlo_instructions(text)
    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp, create_perfetto_trace=True):
            jax.block_until_ready(compiled(keys))
        events = pp.device_events(Path(tmp))
    by_name = collections.defaultdict(lambda: [0.0, 0])
    by_phase = collections.defaultdict(lambda: [0.0, 0])
    by_op = collections.defaultdict(lambda: [0.0, 0, ""])
    for e in events:
        ms = e.get("dur", 0) / 1e3 / updates
        row = by_name[e.get("name", "?")[:70]]
        row[0] += ms
        row[1] += 1 / updates
        op = pp._hlo_op(e, instr)
        info = instr.get(op)
        op_row = by_op[op or e.get("name", "?")[:70]]
        op_row[0] += ms
        op_row[1] += 1 / updates
        op_row[2] = e.get("name", "?")[:50]
        if phases:
            ph = by_phase[pp.phase_of(info["op_name"]) if info else "unattributed"]
            ph[0] += ms
            ph[1] += 1 / updates
    top = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:15]
    top_ops = sorted(by_op.items(), key=lambda kv: -kv[1][0])[:40]
    return {"s_per_update": wall,
            "device_ms_per_update": sum(v[0] for v in by_name.values()),
            "kernels_per_update": sum(v[1] for v in by_name.values()),
            "top_kernels": [[k, round(v[0], 4), round(v[1], 1)] for k, v in top],
            "phases": {k: [round(v[0], 4), round(v[1], 1)] for k, v in by_phase.items()},
            "top_ops": [[k, v[2], round(v[0], 4), round(v[1], 1),
                         (instr.get(k) or {}).get("op_name", "")[-160:]] for k, v in top_ops]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", default="cartpole", choices=sorted(ttr.CASES))
    ap.add_argument("--scale", default="gpu", choices=("paper", "gpu"))
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--updates", type=int, default=10)
    ap.add_argument("--variant", nargs="+", action="append", metavar=("NAME", "KEY=VALUE"),
                    help="a jaxwarp variant: a name and its overrides (repeatable)")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--hlo", default=None, help="write each run's optimised HLO here (gzip)")
    args = ap.parse_args()
    hp = ttr.hyperparameters(args.case, args.scale, None)
    hp["total_env_steps"] = (args.updates * ttr._size(args.case, hp, "num_envs")
                             * ttr._size(args.case, hp, "num_steps"))
    keys = jax.numpy.stack([jax.random.PRNGKey(i) for i in range(args.seeds)])
    res = {"meta": run_meta(), "case": args.case, "scale": args.scale, "seeds": args.seeds,
           "updates": args.updates, "hyperparameters": hp, "runs": {}}
    runs = [] if args.no_peer else [("peer", None)]
    runs += [(name, extra) for name, *extra in (args.variant or [["default"]])]
    for name, extra in runs:
        patches = _patches(extra)
        saved = [(mod, attr, getattr(mod, attr)) for mod, attr, _ in patches]
        for mod, attr, value in patches:
            setattr(mod, attr, value)
        try:
            own = ttr.CASES[args.case]["peer"] == "jaxwarp_jax"  # Tag: the `jax` backend
            if extra is None and own:
                fn, info = _jaxwarp_train(args.case, hp, [], "jax")
            elif extra is None:
                fn, info = ttr.peer_train(args.case, hp)[0], {}
            else:
                fn, info = _jaxwarp_train(args.case, hp,
                                          [e for e in extra if not e.startswith("@")],
                                          "cuda" if jax.default_backend() == "gpu" else "cpu")
            r = {**info, "overrides": extra,
                 **measure(fn, keys, args.updates, extra is not None or own,
                            Path(args.hlo) / f"{name}.hlo.gz" if args.hlo else None,
                            _options(extra))}
        finally:
            for mod, attr, value in saved:
                setattr(mod, attr, value)
        res["runs"][name] = r
        print(f"{name}: {1e3 * r['s_per_update']:.2f} ms per update (wall), device "
              f"{r['device_ms_per_update']:.2f} ms in {r['kernels_per_update']:.0f} kernels "
              f"{info}", flush=True)
        for ph, (ms, n) in sorted(r["phases"].items(), key=lambda kv: -kv[1][0]):
            print(f"    {ph:13s} {ms:8.3f} ms {n:7.1f} kernels")
        for k, ms, n in r["top_kernels"][:8]:
            print(f"      {ms:8.3f} ms {n:7.1f}x  {k}")
        if args.out:
            Path(args.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
