"""Pure-JAX recurrent peers for `bench_time_to_return.py`: IPPO-RNN and MAPPO-RNN
on JaxMARL's MPE, written from the published algorithms (PPO, Schulman et al.
2017; IPPO, de Witt et al. 2020; MAPPO, Yu et al. 2022) in the PureJaxRL layout,
independent of jaxwarp's trainer.

``train = make_train(config, venv)`` gives a pure function ``train(key)``:
``lax.scan`` over updates; each update rolls ``num_steps`` steps of
``num_envs`` envs forward with a GRU carry per agent, computes GAE by a reverse
scan, then runs ``update_epochs`` x ``num_minibatches`` Adam steps. A minibatch
is a set of whole agent sequences (``num_steps`` steps of one agent of one
env), drawn by a permutation of the ``num_envs * num_agents`` sequences, and
replayed from the carry that the rollout started with (BPTT over the rollout):
the embedding and heads run once over all its rows, only the GRU cell steps
through time, as in JaxMARL's ``ScannedRNN``. ``jax.jit(jax.vmap(train))`` trains several seeds in one program.

What JaxMARL publishes and this code follows (``baselines/IPPO/ippo_rnn_mpe.py``
with ``config/ippo_rnn_mpe.yaml``; ``baselines/MAPPO/mappo_rnn_mpe.py`` with
``config/mappo_homogenous_rnn_mpe.yaml``):

* the recurrent network: a ReLU dense embedding of the input (``FC_DIM_SIZE``
  128, orthogonal gain sqrt 2), a GRU cell (``GRU_HIDDEN_DIM`` 128, Flax's
  ``GRUCell``) whose carry is zeroed where the input is the first of an
  episode, then a head of one ReLU layer of 128 units (gain 2) and an output
  layer (gain 0.01 for the logits, 1 for the value); biases zero. The configs'
  ``ACTIVATION: tanh`` is not read by these networks (ReLU throughout);
* IPPO-RNN: one network, GRU shared by the policy and value heads, shared by
  all agents; loss = clipped surrogate + ``VF_COEF`` x clipped value loss -
  ``ENT_COEF`` x entropy; one Adam (eps 1e-5) after a global-norm clip;
* MAPPO-RNN: an actor network (own observation) and a critic network of the
  same shape reading the world state, every agent's observation side by side
  (the same vector for each agent of an env), each with its own GRU carry,
  its own loss (actor: surrogate - entropy; critic: ``VF_COEF`` x clipped value
  loss), its own global-norm clip and Adam;
* both: parameters shared by the agents; the learning rate annealed linearly
  to 0, constant within an update; advantages normalised per minibatch; value
  clipping by ``CLIP_EPS``; GAE that does not bootstrap across an episode's
  end (time limits included); minibatches of agent sequences
  (``NUM_ACTORS = num_envs * num_agents`` of them, permuted, then split).

Returns are measured as in `ippo_reference.py`: per update, the mean over the
episodes finished in its rollout of the per-agent undiscounted return.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from ippo_reference import (PPOConfig, VecEnv, _log_softmax_pick, gae, policy_loss,
                            run_epochs, value_loss)

from jaxwarp.models import orthogonal

_ZEROS = nn.initializers.zeros


@dataclasses.dataclass(frozen=True)
class RNNConfig(PPOConfig):
    """Hyperparameters of one run (JaxMARL's ippo_rnn_mpe.yaml by default): the
    feed-forward peer's, with these defaults, plus the algorithm and the GRU."""

    num_minibatches: int = 2  # minibatches per epoch, of whole agent sequences
    lr: float = 5e-4
    clip_eps: float = 0.3  # ratio clip, and the value clip
    vf_coef: float = 1.0
    hidden_sizes: tuple[int, ...] = (128,)  # ReLU embedding before the GRU (FC_DIM_SIZE)
    activation: str = "relu"  # JaxMARL's recurrent networks are ReLU throughout
    algorithm: str = "ippo"  # "ippo" (shared actor-critic GRU) | "mappo" (critic on world state)
    rnn_size: int = 128  # GRU units, and the heads' hidden width (GRU_HIDDEN_DIM)

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.rnn_size, bool) or not isinstance(self.rnn_size, int) \
                or self.rnn_size < 1:
            raise ValueError(f"RNNConfig.rnn_size={self.rnn_size!r}; expected an int >= 1")
        if self.algorithm not in ("ippo", "mappo"):
            raise ValueError(f"RNNConfig.algorithm={self.algorithm!r}; expected ippo or mappo")


class _ResetGRU(nn.Module):
    """One GRU step whose carry is zeroed where ``reset``: the only part of the
    network that runs step by step (JaxMARL's ``ScannedRNN`` does the same)."""

    rnn_size: int

    @nn.compact
    def __call__(self, carry: jax.Array, xs: tuple[jax.Array, jax.Array]
                 ) -> tuple[jax.Array, jax.Array]:
        x, reset = xs
        carry = jnp.where(reset[..., None], jnp.zeros_like(carry), carry)
        # Flax's GRU with its default initialisers, the recurrent kernel's orthogonal
        # one through jaxwarp's `orthogonal` (the same values; no batched QR under vmap,
        # which can deadlock XLA:CPU's two-thread pool).
        return nn.GRUCell(self.rnn_size, recurrent_kernel_init=orthogonal(1.0))(carry, x)


# The cell scanned over a sequence's leading axis, its parameters shared by every step.
_ScannedGRU = nn.scan(_ResetGRU, variable_broadcast="params", split_rngs={"params": False},
                      in_axes=0, out_axes=0)


class Recurrent(nn.Module):
    """Embedding, GRU, and one head per entry of `outputs` (width, output gain), over
    sequences: carry f32[B, H], x f32[T, B, D], reset bool[T, B] -> (carry after the
    last step, outputs f32[T, B, width] each). The embedding and the heads run once
    over all T x B rows; only the GRU cell is scanned (the rollout passes T = 1)."""

    outputs: tuple[tuple[int, float], ...]
    hidden_sizes: Sequence[int] = (128,)
    rnn_size: int = 128

    def initialize_carry(self, batch_shape: Sequence[int]) -> jax.Array:
        return jnp.zeros((*batch_shape, self.rnn_size), jnp.float32)

    @nn.compact
    def __call__(self, carry: jax.Array, x: jax.Array, reset: jax.Array
                 ) -> tuple[jax.Array, tuple[jax.Array, ...]]:
        for w in self.hidden_sizes:
            x = nn.relu(nn.Dense(w, kernel_init=orthogonal(np.sqrt(2)), bias_init=_ZEROS)(x))
        carry, y = _ScannedGRU(self.rnn_size)(carry, (x, reset))
        outs = []
        for size, gain in self.outputs:
            h = nn.relu(nn.Dense(self.rnn_size, kernel_init=orthogonal(2.0), bias_init=_ZEROS)(y))
            outs.append(nn.Dense(size, kernel_init=orthogonal(gain), bias_init=_ZEROS)(h))
        return carry, tuple(outs)


class Transition(NamedTuple):
    obs: jax.Array  # f32[envs, agents, D]
    state: jax.Array | None  # f32[envs, agents, S]: world state (MAPPO), else None
    reset: jax.Array  # bool[envs, agents]: obs is the first of its episode
    action: jax.Array  # i32[envs, agents]
    log_prob: jax.Array
    value: jax.Array
    reward: jax.Array
    done: jax.Array  # f32[envs, agents]: the episode ended with this step


class RunnerState(NamedTuple):
    params: Any  # IPPO: the network's; MAPPO: (actor's, critic's)
    opt_state: Any
    env_state: Any
    obs: jax.Array  # f32[envs, agents, D]
    first: jax.Array  # bool[envs]: obs begins an episode
    carry: Any  # IPPO: f32[envs, agents, H]; MAPPO: (actor's, critic's)
    ep_return: jax.Array  # f32[envs, agents]
    last_return: jax.Array  # f32[]
    key: jax.Array


def world_state(obs: jax.Array) -> jax.Array:
    """obs f32[..., agents, D] -> f32[..., agents, agents * D]: every agent's
    observation side by side, the same vector for each agent (JaxMARL's MPE
    world state)."""
    n, d = obs.shape[-2:]
    flat = obs.reshape(obs.shape[:-2] + (n * d,))
    return jnp.broadcast_to(flat[..., None, :], obs.shape[:-1] + (n * d,))


def make_train(config: RNNConfig, venv: VecEnv
               ) -> Callable[[jax.Array], tuple[RunnerState, dict[str, jax.Array]]]:
    """``train(key) -> (final RunnerState, metrics)``; metrics "episode_return"
    and "episodes", f32[num_updates] each (as `ippo_reference.make_train`)."""
    c = config
    mappo = c.algorithm == "mappo"
    num_updates = c.num_updates
    actors = c.num_envs * venv.num_agents
    if actors % c.num_minibatches:
        raise ValueError(f"num_minibatches={c.num_minibatches} must divide the {actors} "
                         f"agent sequences (num_envs * num_agents) of an update")
    hs, h = tuple(c.hidden_sizes), c.rnn_size
    if mappo:
        actor = Recurrent(((venv.num_actions, 0.01),), hs, h)
        critic = Recurrent(((1, 1.0),), hs, h)
    else:
        net = Recurrent(((venv.num_actions, 0.01), (1, 1.0)), hs, h)

    def schedule(count):  # constant within an update, linear to 0 over the run
        done = count // (c.num_minibatches * c.update_epochs)
        return c.lr * (1.0 - done / num_updates)

    tx = optax.chain(optax.clip_by_global_norm(c.max_grad_norm),
                     optax.adam(schedule if c.anneal_lr else c.lr, eps=1e-5))

    def forward(params, carry, obs, state, reset):
        """One step of [envs, agents] rows, as a sequence of length 1: (carry,
        logits, value)."""
        one = lambda x: None if x is None else x[None]  # noqa: E731
        if mappo:
            ca, (logits,) = actor.apply(params[0], carry[0], obs[None], reset[None])
            cc, (value,) = critic.apply(params[1], carry[1], one(state), reset[None])
            return (ca, cc), logits[0], value[0, ..., 0]
        carry, (logits, value) = net.apply(params, carry, obs[None], reset[None])
        return carry, logits[0], value[0, ..., 0]

    def rollout_step(carry_, _):
        rs, episodes, ret_sum = carry_
        key, k_act, k_env = jax.random.split(rs.key, 3)
        state = world_state(rs.obs) if mappo else None
        reset = jnp.broadcast_to(rs.first[:, None], rs.obs.shape[:2])
        carry, logits, value = forward(rs.params, rs.carry, rs.obs, state, reset)
        action = jax.random.categorical(k_act, logits).astype(jnp.int32)
        logp = _log_softmax_pick(logits, action)
        obs, env_state, reward, done = venv.step(k_env, rs.env_state, action)
        ep = rs.ep_return + reward
        w = done.astype(jnp.float32)
        step = Transition(rs.obs, state, reset, action, logp, value, reward,
                          jnp.broadcast_to(w[:, None], reward.shape))
        rs = rs._replace(env_state=env_state, obs=obs, first=done, carry=carry,
                         ep_return=jnp.where(done[:, None], 0.0, ep), key=key)
        return (rs, episodes + w.sum(), ret_sum + jnp.sum(w * ep.mean(axis=1))), step

    def replay(apply_fn, params, carry0, xs):
        """Sequences xs = (inputs f32[T, B, D], reset bool[T, B]) from carry0
        f32[B, H]: the outputs of each step, stacked on T."""
        return apply_fn(params, carry0, *xs)[1]

    def surrogate(logits, mb: Transition, adv):
        return policy_loss(logits, mb.action, mb.log_prob, adv, c.clip_eps, c.ent_coef)

    def ippo_loss(params, carry0, mb, adv, target):
        logits, value = replay(net.apply, params, carry0, (mb.obs, mb.reset))
        return (surrogate(logits, mb, adv)
                + c.vf_coef * value_loss(value[..., 0], mb.value, target, c.clip_eps))

    def actor_loss(params, carry0, mb, adv):
        (logits,) = replay(actor.apply, params, carry0, (mb.obs, mb.reset))
        return surrogate(logits, mb, adv)

    def critic_loss(params, carry0, mb, target):
        (value,) = replay(critic.apply, params, carry0, (mb.state, mb.reset))
        return c.vf_coef * value_loss(value[..., 0], mb.value, target, c.clip_eps)

    def apply(params, opt_state, grads):
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    def sgd(carry, mb):
        params, opt_state = carry
        carry0, traj, adv, target = mb
        if not mappo:
            return apply(params, opt_state, jax.grad(ippo_loss)(params, carry0, traj, adv,
                                                                target)), None
        # Two networks, two losses, two optimisers (each its own clip and Adam).
        ga = jax.grad(actor_loss)(params[0], carry0[0], traj, adv)
        gc = jax.grad(critic_loss)(params[1], carry0[1], traj, target)
        pa, sa = apply(params[0], opt_state[0], ga)
        pc, sc = apply(params[1], opt_state[1], gc)
        return ((pa, pc), (sa, sc)), None

    def update(rs: RunnerState, _):
        carry_start = rs.carry
        (rs, episodes, ret_sum), traj = jax.lax.scan(
            rollout_step, (rs, jnp.zeros(()), jnp.zeros(())), None, length=c.num_steps)
        state = world_state(rs.obs) if mappo else None
        reset = jnp.broadcast_to(rs.first[:, None], rs.obs.shape[:2])
        _, _, last_value = forward(rs.params, rs.carry, rs.obs, state, reset)
        adv, target = gae(traj, last_value, c.gamma, c.gae_lambda)
        # Agent sequences: [T, envs, agents, ...] -> [T, envs * agents, ...]; carry [envs *
        # agents, H]. An epoch permutes the sequences and splits them into minibatches.
        seqs = jax.tree.map(lambda x: x.reshape((c.num_steps, actors) + x.shape[3:]),
                            (traj, adv, target))
        carry0 = jax.tree.map(lambda x: x.reshape((actors,) + x.shape[2:]), carry_start)

        def epoch(carry, key):
            perm = jax.random.permutation(key, actors)
            split = lambda x, axis: jnp.moveaxis(  # noqa: E731
                jnp.take(x, perm, axis=axis).reshape(
                    x.shape[:axis] + (c.num_minibatches, -1) + x.shape[axis + 1:]), axis, 0)
            mbs = (jax.tree.map(lambda x: split(x, 0), carry0),
                   *jax.tree.map(lambda x: split(x, 1), seqs))
            return jax.lax.scan(sgd, carry, mbs)[0], None

        return run_epochs(rs, epoch, c.update_epochs, episodes, ret_sum)

    def train(key: jax.Array):
        key, k_a, k_c, k_env = jax.random.split(key, 4)
        obs, env_state = venv.reset(k_env, c.num_envs)
        obs = obs.astype(jnp.float32)
        shape = (c.num_envs, venv.num_agents)
        one = jnp.zeros((1, 1), bool)
        if mappo:
            params = (actor.init(k_a, actor.initialize_carry((1,)), obs[None, 0, :1], one),
                      critic.init(k_c, critic.initialize_carry((1,)),
                                  world_state(obs)[None, 0, :1], one))
            carry = (actor.initialize_carry(shape), critic.initialize_carry(shape))
            opt_state = (tx.init(params[0]), tx.init(params[1]))
        else:
            params = net.init(k_a, net.initialize_carry((1,)), obs[None, 0, :1], one)
            carry = net.initialize_carry(shape)
            opt_state = tx.init(params)
        rs = RunnerState(params=params, opt_state=opt_state, env_state=env_state, obs=obs,
                         first=jnp.ones((c.num_envs,), bool), carry=carry,
                         ep_return=jnp.zeros(shape, jnp.float32),
                         last_return=jnp.full((), jnp.nan, jnp.float32), key=key)
        return jax.lax.scan(update, rs, None, length=num_updates)

    return train
