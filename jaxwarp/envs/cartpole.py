"""CartPole (Gymnasium CartPole-v1) through jaxwarp's authoring contract.

The kernel is `cuda/envs/cartpole.h`, written against `cuda/jaxwarp_env.h`
exactly as a user env would be; its FFI bindings are generated from `SPEC`
and built on first use (`jaxwarp.authoring.build_env`, cached). The pure-JAX
reference is `jaxwarp.envs.classic_control.cartpole_reset/step`.

| observation (f32[envs, 1, 4]) | x, x_dot, theta, theta_dot |
|---|---|
| action (i32[envs, 1, 1]) | 0: push left, 1: push right |
| reward | 1 every step |
| end | terminated: abs(x) > 2.4 or abs(theta) > 12 degrees; truncated: 500 steps |
"""

from __future__ import annotations

import numpy as np

from jaxwarp.authoring import API_DIR, EnvSpec, env_class
from jaxwarp.envs.classic_control import (CartPoleParams, CartPoleState, cartpole_reset,
                                          cartpole_step)

SPEC = EnvSpec(
    name="cartpole",
    header=API_DIR / "envs" / "cartpole.h",
    params_type=CartPoleParams,
    state_type=CartPoleState,
    fields=None,  # declared on the state dataclass (state_field)
    num_agents=lambda p: 1,
    obs_dim=lambda p: 4,
    nvec=lambda p: (2,),
    reference_reset=cartpole_reset,
    reference_step=cartpole_step,
    obs_bounds=lambda p: (
        np.array([-2 * p.x_threshold, -np.inf, -2 * p.theta_threshold_radians, -np.inf]),
        np.array([2 * p.x_threshold, np.inf, 2 * p.theta_threshold_radians, np.inf])),
)


CartPole = env_class(SPEC)  # Gymnasium CartPole-v1; see the module docstring
