"""Pendulum (Gymnasium Pendulum-v1, discrete torques) through jaxwarp's
authoring contract.

The kernel is `cuda/envs/pendulum.h`, written against `cuda/jaxwarp_env.h`
exactly as a user env would be; its FFI bindings are generated from `SPEC`
and built on first use (`jaxwarp.authoring.build_env`, cached). The pure-JAX
reference is `jaxwarp.envs.classic_control.pendulum_reset/step`.

| observation (f32[envs, 1, 3]) | cos theta, sin theta, theta_dot |
|---|---|
| action (i32[envs, 1, 1]) | i in [0, num_torque_levels): torque ``PendulumParams.torques[i]`` (default 5 levels, -2 .. 2) |
| reward | -(normalize(theta)^2 + 0.1 theta_dot^2 + 0.001 u^2) of the state before the step |
| end | never terminated; truncated: 200 steps |
"""

from __future__ import annotations

import numpy as np

from jaxwarp.authoring import API_DIR, EnvSpec, env_class
from jaxwarp.envs.classic_control import (PendulumParams, PendulumState, pendulum_reset,
                                          pendulum_step)

SPEC = EnvSpec(
    name="pendulum",
    header=API_DIR / "envs" / "pendulum.h",
    params_type=PendulumParams,
    state_type=PendulumState,
    fields=None,  # declared on the state dataclass (state_field)
    num_agents=lambda p: 1,
    obs_dim=lambda p: 3,
    nvec=lambda p: (p.num_torque_levels,),
    reference_reset=pendulum_reset,
    reference_step=pendulum_step,
    obs_bounds=lambda p: (np.array([-1.0, -1.0, -p.max_speed]),
                          np.array([1.0, 1.0, p.max_speed])),
)


Pendulum = env_class(SPEC)  # Gymnasium Pendulum-v1 (5 torques); see the module docstring
