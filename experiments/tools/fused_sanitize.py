"""One fused rollout per layout case on the GPU, for compute-sanitizer:
a single-env block with threads beyond the env's (MPE, 5 envs), several envs
per block (MPE, 600 envs), one agent per env without staging (CartPole), two
policy groups with a team pass and observation parts (Tag duel), and 110
agents whose forward pass runs in several passes of rows (Tag, 256-256);
and enough envs that blocks are capped at 16 agents (`kMaxBlockRows`: CartPole
5,000 envs, full row tiles; MPE 2,000 envs, 15 rows a block, a partial tile;
Tag duel 2,000 envs with 3 taggers, rows of two groups in one tile). The
fused rollout is forced where the trainer would pick the scan (past
`fused.MAX_FUSED_WORK`), as in tests/test_fused_rollout.py. Arguments: the
indices of the cases to run (default: all); `--count` prints how many there are.

    compute-sanitizer --tool racecheck --kernel-name kns=rollout \\
        python experiments/tools/fused_sanitize.py 5 6 7
"""

import sys

import jax

from jaxwarp.train import fused, load_config
from jaxwarp.train.trainer import build_trainer

CASES = [("mpe_simple_spread_ppo", ["num_envs=5", "num_steps=30", "num_minibatches=1"]),
         ("mpe_simple_spread_ppo", ["num_envs=600", "num_steps=30"]),
         ("cartpole_ppo", ["num_envs=6", "num_steps=40", "num_minibatches=2"]),
         ("tag_duel_cpu", ["num_envs=4", "num_steps=25", "num_minibatches=2"]),
         ("tag_warpdrive_default", ["num_envs=2", "num_steps=4", "num_minibatches=2"]),
         ("cartpole_ppo", ["num_envs=5000", "num_steps=3"]),
         ("mpe_simple_spread_ppo", ["num_envs=2000", "num_steps=3"]),
         ("tag_duel_cpu", ["num_envs=2000", "num_steps=3", "env_params.num_taggers=3",
                           "env_params.num_runners=4"])]
if sys.argv[1:] == ["--count"]:
    print(len(CASES))
    sys.exit(0)
# The fused rollout wherever it can run, whatever its size (the cases are its layouts).
fused.plan = lambda policy, env, sums, *a: fused.build(policy, env, sums)

for i in [int(a) for a in sys.argv[1:]] or range(len(CASES)):
    config, overrides = CASES[i]
    t = build_trainer(load_config(config, [*overrides, "backend=cuda"]))
    assert t.rollout_path == "fused", (config, t.rollout_path)
    rs = jax.jit(t.init)(jax.random.PRNGKey(0))
    out = jax.block_until_ready(jax.jit(t.rollout)(rs, jax.random.PRNGKey(1)))
    print(config, overrides[0], "ok", float(out[-1].reward.sum()), flush=True)
