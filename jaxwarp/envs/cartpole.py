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

from typing import Any

import numpy as np

from jaxwarp.authoring import API_DIR, EnvSpec, env_class
from jaxwarp.envs.classic_control import (CartPoleParams, CartPoleState, cartpole_constants,
                                          cartpole_reset, cartpole_step)


def kernel_params(p: CartPoleParams) -> dict[str, Any]:
    """The C++ Params of cuda/envs/cartpole.h: the constants of the dynamics
    as the reference folds them (`cartpole_constants`, once here in Python,
    not in float64 by every GPU thread on every step), and the plain params
    the header reads."""
    f32 = np.float32
    return dict(
        force_mag=f32(p.force_mag), gravity=f32(p.gravity), tau=f32(p.tau),
        x_threshold=f32(p.x_threshold), theta_threshold_radians=f32(p.theta_threshold_radians),
        max_steps=np.int32(p.max_steps), **cartpole_constants(p))


SPEC = EnvSpec(
    name="cartpole",
    header=API_DIR / "envs" / "cartpole.h",
    params_type=CartPoleParams,
    state_type=CartPoleState,
    fields=None,  # declared on the state dataclass (state_field)
    num_agents=lambda p: 1,
    obs_dim=lambda p: 4,
    nvec=lambda p: (2,),
    kernel_params=kernel_params,
    reference_reset=cartpole_reset,
    reference_step=cartpole_step,
    obs_bounds=lambda p: (
        np.array([-2 * p.x_threshold, -np.inf, -2 * p.theta_threshold_radians, -np.inf]),
        np.array([2 * p.x_threshold, np.inf, 2 * p.theta_threshold_radians, np.inf])),
)


CartPole = env_class(SPEC)  # Gymnasium CartPole-v1; see the module docstring
