"""The rollout's Mosaic GPU forward (`jaxwarp.models.mlp_mosaic`) once per
case, for compute-sanitizer: Tag's model with rows that do not fill a block
(and fewer blocks than SMs), a 1-layer tanh model of one block, three layers,
and 14 logits (a store of zero columns). Each output is checked against the
Triton forward (within a few bf16 ulps) so a run that the tool lets through
also computed the right thing. Arguments: the cases' indices (default all).

    compute-sanitizer --tool memcheck python experiments/tools/mosaic_sanitize.py
    compute-sanitizer --tool racecheck --kernel-name kns=mosaic \\
        python experiments/tools/mosaic_sanitize.py 0
"""

import itertools
import sys

import jax
import numpy as np

from jaxwarp.models import mlp_kernel, mlp_mosaic

# (obs features, hidden, logits, activation, rows)
CASES = [(71, (256, 256), 42, "relu", 1_001), (13, (128,), 5, "tanh", 64),
         (30, (128, 256, 128), 7, "relu", 777), (71, (256, 256), 14, "relu", 130)]

for i in [int(a) for a in sys.argv[1:]] or range(len(CASES)):
    d, hidden, a, act, rows = CASES[i]
    lay = mlp_kernel.Layout(d, hidden, a + 1, 1, act, "bfloat16", (a,))
    plan = mlp_mosaic.plan_for(lay)
    assert plan is not None, (CASES[i], mlp_mosaic.why_not_here())
    ks = iter(jax.random.split(jax.random.PRNGKey(i), 16))
    dims = (d,) + hidden
    torso = [[(jax.random.normal(next(ks), (k, n)) / np.sqrt(k), jax.random.normal(next(ks), (n,)))
              for k, n in itertools.pairwise(dims)]]
    w = hidden[-1]
    ws = mlp_kernel.pack(lay, torso, (jax.random.normal(next(ks), (w, a)) / np.sqrt(w),
                                      jax.random.normal(next(ks), (a,))),
                         (jax.random.normal(next(ks), (w, 1)) / np.sqrt(w), jax.numpy.ones(1)))
    x = jax.random.normal(next(ks), (rows, d))
    got = np.asarray(jax.jit(lambda x, ws: mlp_mosaic.forward(lay, plan, x, ws))(x, ws))
    want = np.asarray(jax.jit(lambda x, ws: mlp_kernel.forward(lay, x, ws)[0])(x, ws))
    err = float(np.abs(got - want).max() / np.abs(want[:, :lay.out_cols]).max())
    assert err <= 1.6e-2 and np.all(got[:, lay.out_cols:] == 0), (CASES[i], err)
    print(f"case {i} {CASES[i]} {plan} ok (largest difference {err:.1e} of the largest value)",
          flush=True)
