"""The PPO minibatch kernels (`jaxwarp.train.ppo_mosaic`) once per case, for
compute-sanitizer: rows that do not fill a block (the padding's weight 0),
several members folded into one launch, tanh and relu. Each result is checked
against XLA's bfloat16 autodiff of the same loss on the CPU (every leaf within 0.5 of its
largest value, all finite: the tool's runs are small, the GPU tests hold the
tight bounds), so a run the tool lets through also computed the right thing.
Arguments: the cases' indices (default all); `--count` prints how many there are.

    compute-sanitizer --tool memcheck --kernel-name kns=ppo_tower \\
        python experiments/tools/ppo_mosaic_sanitize.py
"""

import functools
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

EXPERIMENTS = str(Path(__file__).resolve().parents[1])
if EXPERIMENTS not in sys.path:  # the bench beside this folder (its XLA side)
    sys.path.insert(0, EXPERIMENTS)

from bench_mosaic_ppo_grad import HYPER, xla_side

from jaxwarp.models.mlp import MLPActorCritic
from jaxwarp.train import losses, ppo_mosaic

# (obs features, actions, rows a member, members, activation)
CASES = [(4, 2, 300, 2, "tanh"), (18, 5, 130, 3, "relu")]


def case(i: int):
    d, a, rows, members, act = CASES[i]
    model = MLPActorCritic(action_dims=(a,), hidden_sizes=(64, 64), activation=act,
                           dtype=jnp.bfloat16)
    ks = jax.random.split(jax.random.PRNGKey(i), members + 6)
    params = jax.vmap(lambda k: model.init(k, jnp.zeros((1, d))))(ks[:members])
    obs = jax.random.normal(ks[members], (members, rows, d))
    acts = jax.random.randint(ks[members + 1], (members, rows, 1), 0, a)
    noise = [jax.random.normal(k, (members, rows)) for k in ks[members + 2:]]
    mb = losses.Batch(obs=obs, actions=acts, log_prob=noise[0] * 0.1 - np.log(a),
                      value=noise[1], advantage=noise[2], target=noise[3])
    return model, params, mb


if sys.argv[1:] == ["--count"]:
    print(len(CASES))
    sys.exit(0)
for i in [int(x) for x in sys.argv[1:]] or range(len(CASES)):
    model, params, mb = case(i)
    members = mb.advantage.shape[0]
    hyper = tuple(jnp.full((members,), v, jnp.float32) for v in HYPER.values())
    got = jax.jit(functools.partial(ppo_mosaic.grads, normalize=True,
                                    actions=model.action_dims[0], act=model.activation))(
        params, mb, hyper)
    # The reference on the CPU: XLA:GPU's dots would autotune under the tool (slow).
    cpu = jax.devices("cpu")[0]
    want = jax.jit(functools.partial(xla_side, model=model))(*jax.device_put((params, mb), cpu))
    got = [np.asarray(g) for g in jax.tree.leaves(got)]
    errs = [float(np.max(np.abs(g - w)) / np.max(np.abs(w)))
            for g, w in zip(got, map(np.asarray, jax.tree.leaves(want)))]
    finite = all(bool(np.all(np.isfinite(g))) for g in got)
    ok = finite and max(errs) < 0.5
    print(f"case {i} {CASES[i]}: largest error {max(errs):.3g}, finite {finite}: "
          f"{'ok' if ok else 'FAILED'}", flush=True)
    if not ok:
        sys.exit(1)
