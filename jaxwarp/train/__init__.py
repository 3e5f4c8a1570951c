"""Training: PPO and A2C over jaxwarp envs as one jitted program.

`make_train(config) -> train(key)` (see `trainer`), configs (`config`),
Flax models (`models`), and the host loop behind ``jaxwarp train`` (`loop`:
`train_run`, chunks of `Trainer.run`, progress, lock, Ctrl-C) with its parts: the metric log
(`metrics`), checkpoints and config.yaml (`checkpoint`), the learning curve
(`plot`) and errors (`errors`); `evaluate` plays a saved run.
"""

from jaxwarp.train.config import (ConfigError, PolicyConfig, TrainConfig, config_from_dict,
                                  derived, load_config, shipped_configs)
from jaxwarp.train.models import MLPActorCritic, UniformPolicy, register_model
from jaxwarp.train.compile import COMPILER_OPTIONS, compiler_options, jit
from jaxwarp.train.trainer import RunnerState, Trainer, build_trainer, make_train

__all__ = [
    "ConfigError", "PolicyConfig", "TrainConfig", "config_from_dict", "derived", "load_config",
    "shipped_configs", "MLPActorCritic", "UniformPolicy", "register_model", "RunnerState",
    "Trainer", "build_trainer", "make_train", "jit", "COMPILER_OPTIONS",
    "compiler_options",
]
