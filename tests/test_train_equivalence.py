"""The learner's changes keep the learning (issue 28, item 3): small fixed-seed
runs give the losses and parameters of the implementation they replaced.

The goldens were computed with the trainer at commit a47679a (before the group
observations were cut per minibatch and before per-device PPO minibatches) by
the same code as `_run` below, on the CPU (`jax` backend and sampler, so no
kernel build is needed). On one device every change since is exact; the
tolerance only allows for float summation order across XLA versions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxwarp.train import load_config, make_train

SMALL = ["backend=jax", "sampler=jax", "policies.tagger.hidden_sizes=[32, 32]",
         "policies.runner.hidden_sizes=[32, 32]"]
CASES = {
    # PPO: 4 minibatches of shuffled envs x 2 epochs, both Tag groups trained.
    "ppo_minibatches": ("tag_duel_cpu", [*SMALL, "num_envs=16", "num_steps=20",
                                         "total_env_steps=960", "num_minibatches=4",
                                         "update_epochs=2", "minibatch_layout=envs"]),
    # A2C: gradients accumulated over 2 chunks of envs (110-agent layout, 20 runners).
    "a2c_chunks": ("tag_warpdrive_default", [*SMALL, "num_envs=8", "num_steps=10",
                                             "total_env_steps=240", "num_minibatches=2",
                                             "env_params.num_runners=20"]),
}
GOLDEN = {
    "ppo_minibatches": {
        "loss": {
            "tagger": [
                0.7503675222396851,
                0.27822065353393555,
                0.9889142513275146
            ],
            "runner": [
                0.35082870721817017,
                0.19287317991256714,
                0.4494602680206299
            ]
        },
        "param_abs_sum": {
            "runner": 708.4378051757812,
            "tagger": 703.612060546875
        }
    },
    "a2c_chunks": {
        "loss": {
            "tagger": [
                12.093353271484375,
                7.991061210632324,
                7.7037811279296875
            ],
            "runner": [
                -1.1204123497009277,
                -0.5044515132904053,
                -0.30232349038124084
            ]
        },
        "param_abs_sum": {
            "runner": 530.6688842773438,
            "tagger": 517.4710693359375
        }
    }
}
RTOL = 1e-4


def _run(config: str, overrides: list[str]) -> dict:
    c = load_config(config, overrides)
    rs, m = jax.jit(make_train(c))(jax.random.PRNGKey(7))
    return {"loss": {g: np.asarray(m[f"{g}/loss"]).tolist() for g in ("tagger", "runner")},
            "param_abs_sum": {g: float(sum(jnp.abs(x).sum() for x in jax.tree.leaves(p)))
                              for g, p in rs.learner.params.items()}}


@pytest.mark.parametrize("case", sorted(CASES))
def test_learning_matches_the_previous_implementation(case):
    got, want = _run(*CASES[case]), GOLDEN[case]
    for g in ("tagger", "runner"):
        assert len(got["loss"][g]) == 3
        np.testing.assert_allclose(got["loss"][g], want["loss"][g], rtol=RTOL, err_msg=g)
        np.testing.assert_allclose(got["param_abs_sum"][g], want["param_abs_sum"][g],
                                   rtol=RTOL, err_msg=g)
    # The updates moved the parameters (a test of something that learns).
    assert len(set(got["loss"]["tagger"])) == 3
