"""Pure-JAX peer trainers for `bench_time_to_return.py`: IPPO on JaxMARL's MPE and
PPO on gymnax's CartPole, written from the published algorithm (PPO, Schulman et
al. 2017; IPPO, de Witt et al. 2020) in the PureJaxRL layout, independent of jaxwarp.

``train = make_train(config, venv)`` gives a pure function ``train(key)`` that
resets ``config.num_envs`` envs, then runs ``lax.scan`` over updates; each
update is a ``lax.scan`` over ``num_steps`` env steps, GAE by a reverse scan,
and ``update_epochs`` x ``num_minibatches`` Adam steps on minibatches drawn
by a permutation of every (step, env, agent) sample (as JaxMARL's and
PureJaxRL's baselines shuffle). One actor-critic is shared by all agents
(parameter sharing, as JaxMARL's IPPO baselines); each agent acts on its own
observation. ``jax.jit(jax.vmap(train))`` trains several seeds in one program.

What the peers publish and this code follows (JaxMARL
``baselines/IPPO/ippo_ff_mpe.py`` and ``config/ippo_ff_mpe.yaml``; PureJaxRL
``purejaxrl/ppo.py``): separate actor and critic MLPs, orthogonal
initialisation (gain sqrt 2 for hidden layers, 0.01 for the policy head, 1 for
the value head), Adam with eps 1e-5 after a global-norm clip, a learning rate
annealed linearly to 0 once per update, per-minibatch advantage
normalisation, clipped value loss, no bootstrapping across ``done`` (episode
ends by time limit included).

Returns are measured the way jaxwarp's trainer measures them, so that the two
can be compared: for each update, the mean over the episodes that finished
during its rollout of the *per-agent* undiscounted episode return (the mean
over the env's agents of each agent's summed reward); the previous update's
value when none finished (NaN before the first). JaxMARL's ``MPELogWrapper``
reports the same sum times the number of agents.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxwarp.models import orthogonal


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """Hyperparameters of one run (JaxMARL's ippo_ff_mpe.yaml by default)."""

    num_envs: int = 16  # env replicas stepped together
    num_steps: int = 128  # rollout length per update
    total_env_steps: int = 10_000_000  # env-steps (one step of one env, all agents) per seed
    update_epochs: int = 4  # passes over each rollout
    num_minibatches: int = 4  # minibatches per epoch (of T x envs x agents samples)
    lr: float = 2.5e-4  # Adam learning rate (annealed linearly to 0 when anneal_lr)
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2  # ratio clip, and the value clip
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    hidden_sizes: tuple[int, ...] = (64, 64)  # actor and critic MLP widths
    activation: str = "tanh"  # "tanh" | "relu"

    def __post_init__(self) -> None:
        for name in ("num_envs", "num_steps", "update_epochs", "num_minibatches"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{type(self).__name__}.{name}={v!r}; expected an int >= 1")
        if self.total_env_steps < self.num_envs * self.num_steps:
            raise ValueError(f"{type(self).__name__}.total_env_steps={self.total_env_steps}; "
                             "expected at "
                             f"least one update (num_envs * num_steps = "
                             f"{self.num_envs * self.num_steps})")
        if self.activation not in ("tanh", "relu"):
            raise ValueError(f"{type(self).__name__}.activation={self.activation!r}; expected "
                             "tanh or relu")

    @property
    def num_updates(self) -> int:
        return self.total_env_steps // (self.num_envs * self.num_steps)


class VecEnv(NamedTuple):
    """A batched env in stacked layout, the interface the trainer needs.

    reset(key, num_envs) -> (obs f32[envs, agents, obs_dim], state);
    step(key, state, actions i32[envs, agents]) -> (obs, state,
    reward f32[envs, agents], done bool[envs]); finished envs restart inside
    step (obs is then the new episode's first).
    """

    name: str
    num_agents: int
    obs_dim: int
    num_actions: int
    reset: Callable[[jax.Array, int], tuple[jax.Array, Any]]
    step: Callable[[jax.Array, Any, jax.Array], tuple[jax.Array, Any, jax.Array, jax.Array]]


def jaxmarl_env(name: str = "MPE_simple_spread_v3", **kwargs: Any) -> VecEnv:
    """JaxMARL's env `name` (its own auto-reset) vmapped over envs, agents stacked
    in ``env.agents`` order. All agents must share one observation and one
    discrete action space (MPE simple_spread)."""
    import jaxmarl

    env = jaxmarl.make(name, **kwargs)
    agents = list(env.agents)
    dims = {int(np.prod(env.observation_space(a).shape)) for a in agents}
    acts = {int(env.action_space(a).n) for a in agents}
    if len(dims) != 1 or len(acts) != 1:
        raise ValueError(f"jaxmarl_env: {name} has agents with different spaces "
                         f"(obs dims {sorted(dims)}, actions {sorted(acts)})")

    def stack(d):
        return jnp.stack([d[a] for a in agents], axis=1)

    def reset(key, num_envs):
        obs, state = jax.vmap(env.reset)(jax.random.split(key, num_envs))
        return stack(obs), state

    def step(key, state, actions):
        keys = jax.random.split(key, actions.shape[0])
        act = {a: actions[:, i] for i, a in enumerate(agents)}
        obs, state, reward, done, _ = jax.vmap(env.step)(keys, state, act)
        return stack(obs), state, stack(reward), done["__all__"]

    return VecEnv(name, len(agents), dims.pop(), acts.pop(), reset, step)


def gae(traj: Any, last_value: jax.Array, gamma: float, gae_lambda: float
        ) -> tuple[jax.Array, jax.Array]:
    """(advantages, value targets) of a rollout ``traj`` (fields reward, value,
    done [T, ...]) by GAE's reverse scan; no bootstrap across an episode's end."""
    def back(carry, t):
        adv_next, v_next = carry
        live = 1.0 - t.done
        delta = t.reward + gamma * v_next * live - t.value
        adv = delta + gamma * gae_lambda * live * adv_next
        return (adv, t.value), adv

    _, adv = jax.lax.scan(back, (jnp.zeros_like(last_value), last_value), traj, reverse=True)
    return adv, adv + traj.value


def policy_loss(logits: jax.Array, action: jax.Array, old_logp: jax.Array, adv: jax.Array,
                clip_eps: float, ent_coef: float) -> jax.Array:
    """PPO's clipped surrogate (advantages normalised over the minibatch) minus
    ``ent_coef`` x the mean entropy."""
    logp_all = jax.nn.log_softmax(logits)
    logp = jnp.take_along_axis(logp_all, action[..., None], axis=-1)[..., 0]
    ratio = jnp.exp(logp - old_logp)
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg = -jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - clip_eps, 1 + clip_eps) * adv).mean()
    entropy = -jnp.sum(jnp.exp(logp_all) * logp_all, axis=-1).mean()
    return pg - ent_coef * entropy


def value_loss(value: jax.Array, old_value: jax.Array, target: jax.Array, clip_eps: float
               ) -> jax.Array:
    """PPO's clipped value loss: half the larger of the squared errors of the
    value and of the value clipped to ``old_value +- clip_eps``."""
    v_clip = old_value + jnp.clip(value - old_value, -clip_eps, clip_eps)
    return 0.5 * jnp.maximum(jnp.square(value - target), jnp.square(v_clip - target)).mean()


def run_epochs(rs: Any, epoch: Callable, update_epochs: int, episodes: jax.Array,
               ret_sum: jax.Array) -> tuple[Any, dict[str, jax.Array]]:
    """An update's learning and its log row: `update_epochs` scans of ``epoch``
    ((params, opt_state), key) over the runner state ``rs``'s parameters, then
    the mean return of the episodes the rollout finished (the last one's where
    none did)."""
    key, k_upd = jax.random.split(rs.key)
    (params, opt_state), _ = jax.lax.scan(epoch, (rs.params, rs.opt_state),
                                          jax.random.split(k_upd, update_epochs))
    last_return = jnp.where(episodes > 0, ret_sum / jnp.maximum(episodes, 1.0), rs.last_return)
    rs = rs._replace(params=params, opt_state=opt_state, last_return=last_return, key=key)
    return rs, {"episode_return": last_return, "episodes": episodes}


def import_gymnax():
    """``import gymnax``. gymnax 1.x imports seaborn at load only to colour its Pong
    renderer; where seaborn is missing (our GPU machine), an empty stand-in module
    lets the import through (CartPole never touches it)."""
    try:
        import seaborn  # noqa: F401
    except ImportError:
        sys.modules.setdefault("seaborn", types.ModuleType("seaborn"))
    import gymnax

    return gymnax


def gymnax_env(name: str = "CartPole-v1") -> VecEnv:
    """gymnax env `name` (its own auto-reset, default params) vmapped over envs,
    as one agent."""
    gymnax = import_gymnax()
    env, params = gymnax.make(name)
    obs_dim = int(np.prod(env.observation_space(params).shape))

    def reset(key, num_envs):
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, num_envs),
                                                            params)
        return obs.reshape(num_envs, 1, obs_dim), state

    def step(key, state, actions):
        n = actions.shape[0]
        out = jax.vmap(env.step, in_axes=(0, 0, 0, None))(jax.random.split(key, n), state,
                                                          actions[:, 0], params)
        if len(out) == 6:  # gymnax 1.x: obs, state, reward, terminated, truncated, info
            obs, state, reward, term, trunc, _ = out
            done = term | trunc
        else:  # gymnax 0.0.x: obs, state, reward, done, info
            obs, state, reward, done, _ = out
        return obs.reshape(n, 1, obs_dim), state, reward.reshape(n, 1), done

    return VecEnv(name, 1, obs_dim, int(env.action_space(params).n), reset, step)


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs: obs f32[..., D] -> (logits f32[..., A],
    value f32[...])."""

    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        act = nn.tanh if self.activation == "tanh" else nn.relu
        # Flax's orthogonal initializer, one QR per matrix under vmap over seeds
        # (batched LAPACK QRs can deadlock XLA:CPU on 2 cores; same values).
        ortho = orthogonal
        zeros = nn.initializers.zeros

        def tower(h: jax.Array) -> jax.Array:
            for width in self.hidden_sizes:
                h = act(nn.Dense(width, kernel_init=ortho(np.sqrt(2)), bias_init=zeros)(h))
            return h

        logits = nn.Dense(self.num_actions, kernel_init=ortho(0.01), bias_init=zeros)(tower(x))
        value = nn.Dense(1, kernel_init=ortho(1.0), bias_init=zeros)(tower(x))
        return logits, value[..., 0]


class Transition(NamedTuple):
    obs: jax.Array  # f32[envs, agents, D]
    action: jax.Array  # i32[envs, agents]
    log_prob: jax.Array  # f32[envs, agents]
    value: jax.Array  # f32[envs, agents]
    reward: jax.Array  # f32[envs, agents]
    done: jax.Array  # f32[envs, agents]: the episode ended with this step


class RunnerState(NamedTuple):
    params: Any
    opt_state: Any
    env_state: Any
    obs: jax.Array
    ep_return: jax.Array  # f32[envs, agents]: return so far of the running episodes
    last_return: jax.Array  # f32[]: see the module docstring
    key: jax.Array


def _log_softmax_pick(logits: jax.Array, action: jax.Array) -> jax.Array:
    logp = jax.nn.log_softmax(logits)
    return jnp.take_along_axis(logp, action[..., None], axis=-1)[..., 0]


def make_train(config: PPOConfig, venv: VecEnv
               ) -> Callable[[jax.Array], tuple[RunnerState, dict[str, jax.Array]]]:
    """``train(key) -> (final RunnerState, metrics)``; metrics: "episode_return"
    f32[num_updates] (per-agent return, see the module docstring), "episodes"
    f32[num_updates] (episodes finished in each update's rollout)."""
    c = config
    num_updates = c.num_updates
    batch = c.num_steps * c.num_envs * venv.num_agents
    if batch % c.num_minibatches:
        raise ValueError(f"num_minibatches={c.num_minibatches} must divide the "
                         f"{batch} samples of an update")
    net = ActorCritic(venv.num_actions, tuple(c.hidden_sizes), c.activation)

    def schedule(count):  # constant within an update, linear to 0 over the run
        done = count // (c.num_minibatches * c.update_epochs)
        return c.lr * (1.0 - done / num_updates)

    tx = optax.chain(optax.clip_by_global_norm(c.max_grad_norm),
                     optax.adam(schedule if c.anneal_lr else c.lr, eps=1e-5))

    def rollout_step(carry, _):
        rs, episodes, ret_sum = carry
        key, k_act, k_env = jax.random.split(rs.key, 3)
        logits, value = net.apply(rs.params, rs.obs)
        action = jax.random.categorical(k_act, logits).astype(jnp.int32)
        logp = _log_softmax_pick(logits, action)
        obs, env_state, reward, done = venv.step(k_env, rs.env_state, action)
        ep = rs.ep_return + reward
        w = done.astype(jnp.float32)
        step = Transition(rs.obs, action, logp, value, reward,
                          jnp.broadcast_to(w[:, None], reward.shape))
        rs = rs._replace(env_state=env_state, obs=obs,
                         ep_return=jnp.where(done[:, None], 0.0, ep), key=key)
        return (rs, episodes + w.sum(), ret_sum + jnp.sum(w * ep.mean(axis=1))), step

    def loss_fn(params, mb: Transition, adv: jax.Array, target: jax.Array):
        logits, value = net.apply(params, mb.obs)
        return (policy_loss(logits, mb.action, mb.log_prob, adv, c.clip_eps, c.ent_coef)
                + c.vf_coef * value_loss(value, mb.value, target, c.clip_eps))

    grad_fn = jax.grad(loss_fn)

    def update(rs: RunnerState, _):
        (rs, episodes, ret_sum), traj = jax.lax.scan(
            rollout_step, (rs, jnp.zeros(()), jnp.zeros(())), None, length=c.num_steps)
        _, last_value = net.apply(rs.params, rs.obs)
        adv, target = gae(traj, last_value, c.gamma, c.gae_lambda)
        # Every (step, env, agent) sample is one row; minibatches are random row sets.
        flat = jax.tree.map(lambda x: x.reshape((batch,) + x.shape[3:]), (traj, adv, target))

        def epoch(carry, key):
            perm = jax.random.permutation(key, batch)
            mbs = jax.tree.map(
                lambda x: jnp.take(x, perm, axis=0).reshape((c.num_minibatches, -1) + x.shape[1:]),
                flat)

            def sgd(carry, mb):
                params, opt_state = carry
                grads = grad_fn(params, *mb)
                updates, opt_state = tx.update(grads, opt_state, params)
                return (optax.apply_updates(params, updates), opt_state), None

            return jax.lax.scan(sgd, carry, mbs)[0], None

        return run_epochs(rs, epoch, c.update_epochs, episodes, ret_sum)

    def train(key: jax.Array):
        key, k_net, k_env = jax.random.split(key, 3)
        obs, env_state = venv.reset(k_env, c.num_envs)
        params = net.init(k_net, jnp.zeros((1, venv.obs_dim), jnp.float32))
        rs = RunnerState(params=params, opt_state=tx.init(params), env_state=env_state,
                         obs=obs.astype(jnp.float32),
                         ep_return=jnp.zeros((c.num_envs, venv.num_agents), jnp.float32),
                         last_return=jnp.full((), jnp.nan, jnp.float32), key=key)
        return jax.lax.scan(update, rs, None, length=num_updates)

    return train
