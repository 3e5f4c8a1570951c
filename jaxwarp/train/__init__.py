"""The algorithm: PPO and A2C over jaxwarp envs as one jitted program.

`make_train(config) -> train(key)` (`trainer`) is the whole program; its
pieces: the config (`config`), the env (`environment`) on the data-parallel
mesh (`mesh`), the policy groups and their models' contract (`policy`),
their observation statistics (`obs_stats`), the policy and action sampler a
config asks for (`setup`), the runner state and its start (`state`), one
update (`update`), the rollout (`rollout`, `fused`: the whole rollout as one
custom call), advantages and losses (`losses`), the update of one group
(`learn`) over its minibatches (`minibatches`) with its optimiser
(`optim`). Beside them: the hyperparameters a sweep varies (`hyper`), a
sweep's settings (`sweep`), the seeds (`seeds`) and the compiler options
(`compile`). The models live in `jaxwarp.models`, the host loop behind
``jaxwarp train`` (progress, checkpoints, Ctrl-C) in `jaxwarp.run`.
"""

# The config first: its imports load numpy from Python code, where a Ctrl-C
# during `jaxwarp train`'s imports stays a KeyboardInterrupt; the models'
# (flax, jax) would load it first from inside jaxlib's extension, which turns
# it into an ImportError (tests/test_first_use.py).
from jaxwarp.train.config import (ConfigError, PolicyConfig, TrainConfig, config_from_dict,
                                  derived, load_config, shipped_configs)
from jaxwarp.models import MLPActorCritic, UniformPolicy, register_model
from jaxwarp.train.compile import COMPILER_OPTIONS, compiler_options, jit
from jaxwarp.train.trainer import RunnerState, Trainer, build_trainer, make_train

__all__ = [
    "ConfigError", "PolicyConfig", "TrainConfig", "config_from_dict", "derived", "load_config",
    "shipped_configs", "MLPActorCritic", "UniformPolicy", "register_model", "RunnerState",
    "Trainer", "build_trainer", "make_train", "jit", "COMPILER_OPTIONS",
    "compiler_options",
]
