"""MountainCar (Gymnasium MountainCar-v0) through jaxwarp's authoring contract.

The kernel is `cuda/envs/mountain_car.h`, written against `cuda/jaxwarp_env.h`
exactly as a user env would be; its FFI bindings are generated from `SPEC`
and built on first use (`jaxwarp.authoring.build_env`, cached). The pure-JAX
reference is `jaxwarp.envs.classic_control.mountain_car_reset/step`.

| observation (f32[envs, 1, 2]) | position, velocity |
|---|---|
| action (i32[envs, 1, 1]) | 0: push left, 1: no push, 2: push right |
| reward | -1 every step |
| end | terminated: position >= 0.5 and velocity >= 0; truncated: 200 steps |
"""

from __future__ import annotations

import numpy as np

from jaxwarp.authoring import API_DIR, EnvSpec, env_class
from jaxwarp.envs.classic_control import (MountainCarParams, MountainCarState,
                                          mountain_car_reset, mountain_car_step)

SPEC = EnvSpec(
    name="mountain_car",
    header=API_DIR / "envs" / "mountain_car.h",
    params_type=MountainCarParams,
    state_type=MountainCarState,
    fields=None,  # declared on the state dataclass (state_field)
    num_agents=lambda p: 1,
    obs_dim=lambda p: 2,
    nvec=lambda p: (3,),
    reference_reset=mountain_car_reset,
    reference_step=mountain_car_step,
    obs_bounds=lambda p: (np.array([p.min_position, -p.max_speed]),
                          np.array([p.max_position, p.max_speed])),
)


MountainCar = env_class(SPEC)  # Gymnasium MountainCar-v0; see the module docstring
