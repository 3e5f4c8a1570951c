"""Every policy group's optimiser, made once from the config.

A group's optimiser is a function of the run's `Hyper` (`Optimiser`): its
learning rate and gradient clip are arrays in the runner state, which a
sweep's members differ in, so the Optax transformation itself is built
inside the program. The runner state's start (`state.init_state`) and every
update (`learn.learn`) call the same function, which the `Learner` carries.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

import jax
import optax

from jaxwarp.train.config import Derived, TrainConfig
from jaxwarp.train.hyper import Hyper

# A sweep member's (or a plain run's) Hyper -> the group's Optax transformation
Optimiser = Callable[[Hyper], optax.GradientTransformation]


def optimisers(c: TrainConfig, d: Derived, groups: Iterable[str]) -> dict[str, Optimiser]:
    """Group -> its `Optimiser`: Adam (eps 1e-5) at the group's learning rate
    ``hyper.lr[group]`` (f32[]), linearly annealed to 0 over the run where
    ``anneal_lr``, after global-norm clipping at ``hyper.max_grad_norm`` (off
    where 0). The state's structure does not depend on `hyper`'s values, so
    one program starts and steps every member of a sweep."""
    steps = d.num_updates * d.optimizer_steps  # the schedule's length: every step of the run

    def optimiser(group: str, hyper: Hyper) -> optax.GradientTransformation:
        lr = hyper.lr[group]
        schedule = optax.linear_schedule(lr, 0.0, steps) if c.anneal_lr else lr
        adam = optax.adam(schedule, eps=1e-5)
        tx = optax.chain(optax.clip_by_global_norm(hyper.grad_clip()), adam)
        if c.critic != "centralised":
            return tx
        # MAPPO: actor and critic are two networks with an optimiser each (their own
        # Adam moments and gradient-norm clip), so the critic's larger gradients do
        # not shrink the actor's step through one shared clip.
        return optax.multi_transform(
            {"actor": tx, "critic": tx},
            lambda params: {k: jax.tree.map(lambda _, k=k: k, v) for k, v in params.items()})

    return {g: functools.partial(optimiser, g) for g in groups}
