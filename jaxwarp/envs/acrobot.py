"""Acrobot (Gymnasium Acrobot-v1) through jaxwarp's authoring contract.

The kernel is `cuda/envs/acrobot.h`, written against `cuda/jaxwarp_env.h`
exactly as a user env would be; its FFI bindings are generated from `SPEC`
and built on first use (`jaxwarp.authoring.build_env`, cached). The pure-JAX
reference is `jaxwarp.envs.classic_control.acrobot_reset/step`.

| observation (f32[envs, 1, 6]) | cos t1, sin t1, cos t2, sin t2, dtheta1, dtheta2 |
|---|---|
| action (i32[envs, 1, 1]) | torque 0: -1, 1: 0, 2: +1 on the middle joint |
| reward | -1 every step, 0 on the terminating step |
| end | terminated: -cos t1 - cos(t1 + t2) > 1 (tip above the line); truncated: 500 steps |
"""

from __future__ import annotations

import numpy as np

from jaxwarp.authoring import API_DIR, EnvSpec, env_class
from jaxwarp.envs.classic_control import (AcrobotParams, AcrobotState, acrobot_reset,
                                          acrobot_step)

SPEC = EnvSpec(
    name="acrobot",
    header=API_DIR / "envs" / "acrobot.h",
    params_type=AcrobotParams,
    state_type=AcrobotState,
    fields=None,  # declared on the state dataclass (state_field)
    num_agents=lambda p: 1,
    obs_dim=lambda p: 6,
    nvec=lambda p: (3,),
    reference_reset=acrobot_reset,
    reference_step=acrobot_step,
    obs_bounds=lambda p: (
        np.array([-1.0, -1.0, -1.0, -1.0, -p.max_vel_1, -p.max_vel_2]),
        np.array([1.0, 1.0, 1.0, 1.0, p.max_vel_1, p.max_vel_2])),
)


Acrobot = env_class(SPEC)  # Gymnasium Acrobot-v1; see the module docstring
