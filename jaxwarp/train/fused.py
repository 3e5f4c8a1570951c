"""The fused rollout: a whole rollout of a built-in MLP policy in one custom call.

`rollout` (jaxwarp.train.rollout) runs each step as the policy's forward pass,
the sampler's call and the env's call: at small batches a chain of small
launches per step. Where the policy is the built-in ``mlp`` model (float32,
tanh or relu, feed-forward, its own value head) and the env is a kernel env,
`plan` returns a `FusedRollout` instead: one call of the env's library
(cuda/jaxwarp_fused.h) does every step's forward pass, draws and env step,
and writes the same `Transition` (same actions for the same keys as the
step-by-step path wherever the two paths' logits, equal to float rounding,
do not straddle a draw's decision; tests/test_fused_rollout.py). Everything
else keeps the step-by-step rollout; `choice` says why (docs/models.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp import _ffi
from jaxwarp.core import key_data_of
from jaxwarp.models import MLPActorCritic
from jaxwarp.train.policy import Policy
from jaxwarp.train.rollout import Acting, EnvCarry, EpisodeSums, Transition, rollout

# The CUDA/CPU fused rollout's model limits and activation codes, read from
# cuda/jaxwarp_fused.h (fused::kMaxLayers, kMaxWidth, kActTanh, kActRelu);
# not the Pallas MLP kernel's (jaxwarp.models.mlp_kernel.MAX_LAYERS).
_FUSED_H = _ffi.header_constants("jaxwarp_fused.h")
ROLLOUT_MAX_LAYERS = _FUSED_H["kMaxLayers"]  # hidden layers
ROLLOUT_MAX_WIDTH = _FUSED_H["kMaxWidth"]  # units per hidden layer
ROLLOUT_ACTIVATIONS = {"tanh": _FUSED_H["kActTanh"], "relu": _FUSED_H["kActRelu"]}  # name -> code
# The trainer fuses models of at most this many parameters per group. The
# kernel's forward pass is plain fused multiply-adds (no tensor cores): on
# the H200 the fused rollout won 1.4-3.1x with 64-64 models (9-12K
# parameters: MPE, CartPole, Tag duel) and lost 29x with WarpDrive's
# 256-256 Tag model (95K) against XLA's matmuls (docs/decisions.md,
# experiments/results/fused_rollout_h200.json).
MAX_FUSED_PARAMS = 16384
# And at most this much work per launch: agents (envs x agents, every vmapped
# seed's) times parameters per group. The forward pass's FMAs take time in
# proportion to it, XLA's tensor-core matmuls far less, so past some size the
# step-by-step rollout's launches cost less than the kernel's arithmetic. With
# 64-64 models (docs/decisions.md) the fused rollout won at 2-3e7 (one seed of
# CartPole 2,048 envs and MPE 3,072 agents, `bench_fused_rollout.py`) and at
# 5.4e7 (Tag duel, 10 x 64 envs, H200), drew at 1.8e8 (CartPole, 10 x 2,048 envs,
# H100) and lost at 3.4e8 (MPE, 10 x 1,024 envs, H100) and 1.7e9 (Tag duel, 10 x
# 2,048 envs, H200: 41 ms a rollout against 11 ms step by step); the limit sits
# between the last win and the draw (nothing measured in between).
MAX_FUSED_WORK = 100_000_000


def _past_work_limit(agents: int, params: int) -> bool:
    """Whether a launch of `agents` agents of `params` parameters per group is
    past MAX_FUSED_WORK (`choice` for one run, the vmap rule for seeds)."""
    return agents * params > MAX_FUSED_WORK


def _architecture(net: Any) -> tuple | str:
    """The MLP's (hidden sizes, activation, shared torso), or why it is not fusable."""
    if type(net) is not MLPActorCritic:
        return f"model {type(net).__name__} (only the built-in 'mlp')"
    if jnp.dtype(net.dtype) != jnp.float32:
        return f"model dtype {jnp.dtype(net.dtype).name} (only float32)"
    if net.activation not in ROLLOUT_ACTIVATIONS:
        return f"activation {net.activation!r} (only {sorted(ROLLOUT_ACTIVATIONS)})"
    widths = tuple(int(w) for w in net.hidden_sizes)
    if len(widths) > ROLLOUT_MAX_LAYERS or any(not 1 <= w <= ROLLOUT_MAX_WIDTH for w in widths):
        return (f"hidden sizes {list(widths)} (at most {ROLLOUT_MAX_LAYERS} layers of "
                f"1..{ROLLOUT_MAX_WIDTH})")
    return widths, net.activation, bool(net.shared_torso)


def why_not(policy: Policy, env: Any, sampler: str, sharded: bool) -> str | None:
    """Why the trainer's rollout cannot run fused (None: it can)."""
    from jaxwarp.authoring import ContractEnv

    if not isinstance(env, ContractEnv) or env.backend not in ("cpu", "cuda"):
        return "the env is not a kernel env on the cpu or cuda backend"
    if sampler != env.backend:
        return f"sampler {sampler!r} differs from the env's backend {env.backend!r}"
    if sharded:
        return "the envs are split over several devices"
    if policy.normalize_obs:
        return "normalize_obs"
    if policy.critics is not None:
        return "a centralised critic"
    if jnp.dtype(env.obs_dtype) != jnp.float32:
        return "obs_dtype bfloat16"
    if "episode_return" not in [f.name for f in env.spec.fields]:
        return "the env's state has no episode_return"
    archs = {g: _architecture(policy.nets[g]) for g in policy.groups.ids}
    for g, a in archs.items():
        if isinstance(a, str):
            return f"policies.{g}: {a}"
    if len(set(archs.values())) > 1:
        return "the policy groups' models differ in architecture"
    return None


def mlp_words(net: MLPActorCritic, obs_dim: int, num_groups: int) -> tuple[int, ...]:
    """The model as cuda/jaxwarp_fused.h's make_mlp reads it: (in_dim,
    layers, shared, activation, logits, groups, widths...)."""
    widths = [int(w) for w in net.hidden_sizes]
    return (obs_dim, len(widths), int(bool(net.shared_torso)), ROLLOUT_ACTIVATIONS[net.activation],
            int(sum(net.action_dims)), num_groups, *widths)


def pack(params: Mapping[str, Any], groups: Sequence[str]) -> jax.Array:
    """f32[groups, P]: each group's parameters flat, its Dense_<i> layers in
    order of i, each layer's kernel [in, out] (row-major) then its bias."""
    rows = []
    for g in groups:
        layers = params[g]["params"]
        order = sorted(layers, key=lambda name: int(name.rsplit("_", 1)[1]))
        rows.append(jnp.concatenate([jnp.concatenate([layers[k]["kernel"].ravel(),
                                                      layers[k]["bias"]]) for k in order]))
    return jnp.stack(rows).astype(jnp.float32)


class FusedRollout(NamedTuple):
    """A drop-in for `jaxwarp.train.rollout.rollout` (same arguments, same
    results) for the policies and envs `why_not` lets through."""

    policy: Policy
    env: Any
    sums: EpisodeSums
    mlp: tuple[int, ...]
    agent_group: np.ndarray  # i32[agents]: index of each agent's group in policy.groups.ids

    def keys(self, key: jax.Array, num_steps: int) -> tuple[jax.Array, jax.Array]:
        """Each step's env keys u32[T, 3] and the sampler's head keys
        u32[T, heads, 2]: the keys the step-by-step rollout passes to
        env.step and sample_actions (key split into steps, each step's into
        an action key and an env key)."""
        from jaxwarp.sampler import _head_keys

        heads = len(self.policy.nvec)
        pair = jax.vmap(jax.random.split)(jax.random.split(key, num_steps))
        env_keys = jax.vmap(lambda k: self.env._keys(k, 0))(pair[:, 1])
        head_keys = jax.vmap(lambda k: jax.random.key_data(
            _head_keys(k, key_data_of(k), heads)))(pair[:, 0])
        return env_keys, head_keys

    def __call__(self, acting: Acting, params: Mapping[str, Any], stats: Any, envs: EnvCarry,
                 key: jax.Array, num_steps: int, env_params: jax.Array | None = None
                 ) -> tuple[EnvCarry, dict[str, jax.Array], Transition]:
        """`rollout`'s arguments and results: `num_steps` steps from `envs`
        (obs f32[envs, agents, obs_dim], first bool[envs]; the carry stays
        as it is: no group is recurrent); returns (the envs after the last
        step, episode sums name -> f32[], Transition of [T, ...] arrays).
        `acting` and `stats` are used only where the call runs step by step
        (the fused kernel has this object's own policy, env and sums; no
        centralised critic, no normalize_obs). env_params: the env's Params
        words i32[W] (`Hyper.env`; None: its own), read by the fused kernel
        as by the env's step (each member its own row).

        Under `jax.vmap` (several seeds) the members' envs fold into one
        launch; where they would make it more than MAX_FUSED_WORK (agents
        of the launch times parameters per group) the members run the
        step-by-step rollout instead, as `choice` picks it for one member.
        (One level of vmap: the trainer's, over seeds.)"""

        def fused_one(params, stats, envs, key, words):
            return self._fused(params, envs, key, num_steps, words)

        def step_by_step(params, stats, envs, key, words):
            return rollout(acting, params, stats, envs, key, num_steps, words)

        @jax.custom_batching.custom_vmap
        def one(*args):
            return fused_one(*args)

        @one.def_vmap
        def batched(size, in_batched, *args):
            args = jax.tree.map(lambda x, b: x if b else jnp.broadcast_to(x, (size, *x.shape)),
                                args, tuple(in_batched))
            agents = size * args[2].obs.shape[1] * args[2].obs.shape[2]  # [size, envs, agents, dim]
            big = _past_work_limit(agents, param_count(self.mlp))
            out = jax.vmap(step_by_step if big else fused_one)(*args)
            return out, jax.tree.map(lambda _: True, out)

        words = jnp.asarray(self.env.param_words()) if env_params is None else env_params
        return one(params, stats, envs, key, words)

    def _fused(self, params: Mapping[str, Any], envs: EnvCarry, key: jax.Array, num_steps: int,
               words: jax.Array) -> tuple[EnvCarry, dict[str, jax.Array], Transition]:
        """The fused call for one member (words: the env's Params words
        i32[W]); `__call__`'s results."""
        env_keys, head_keys = self.keys(key, num_steps)
        weights = pack(params, list(self.policy.groups.ids))
        env_state, next_obs, traj = _call(self, env_keys, head_keys, weights, envs.obs,
                                          envs.env_state, words)
        done = traj["done"]
        w = done.astype(jnp.float32)
        per_step = jax.vmap(self.sums)(traj["episode_return"], w)
        ep = {k: v.sum() for k, v in per_step.items()}
        ep["episodes"] = w.sum()
        step = Transition(traj["obs"], traj["actions"], traj["log_prob"], traj["value"],
                          traj["reward"], done,
                          jnp.concatenate([envs.first[None], done[:-1]]), None)
        return EnvCarry(env_state, next_obs, dict(envs.carry), done[-1]), ep, step


def _call(f: FusedRollout, env_keys, head_keys, weights, obs, state, words):
    """env.rollout_call for one member (env_keys u32[T, 3], ..., the env's
    Params words i32[W]) or, under `jax.vmap`, for all members in one call
    (their envs folded into the env axis, words i32[members, W] one row per
    member; the step-major trajectory moved back to member-major after)."""

    def call(env_keys, head_keys, weights, obs, state, words):
        return f.env.rollout_call(env_keys, head_keys, weights, jnp.asarray(f.agent_group),
                                  obs, state, mlp=f.mlp, nvec=f.policy.nvec,
                                  partitionable=bool(jax.config.jax_threefry_partitionable),
                                  params=words)

    @jax.custom_batching.custom_vmap
    def one(env_keys, head_keys, weights, obs, state, words):
        return call(env_keys[:, None], head_keys[:, None], weights[None], obs, state, words)

    @one.def_vmap
    def batched(size, in_batched, env_keys, head_keys, weights, obs, state, words):
        args = jax.tree.map(lambda x, b: x if b else jnp.broadcast_to(x, (size, *x.shape)),
                            (env_keys, head_keys, weights, obs, state, words), tuple(in_batched))
        env_keys, head_keys, weights, obs, state, words = args
        envs = obs.shape[1]
        fold = lambda x: x.reshape(size * envs, *x.shape[2:])  # noqa: E731
        state, next_obs, traj = call(jnp.swapaxes(env_keys, 0, 1),
                                     jnp.swapaxes(head_keys, 0, 1), weights, fold(obs),
                                     jax.tree.map(fold, state), words)
        unfold = lambda x: x.reshape(size, envs, *x.shape[1:])  # noqa: E731
        traj = {k: jnp.moveaxis(v.reshape(v.shape[0], size, envs, *v.shape[2:]), 1, 0)
                for k, v in traj.items()}
        out = (jax.tree.map(unfold, state), unfold(next_obs), traj)
        return out, jax.tree.map(lambda _: True, out)

    return one(env_keys, head_keys, weights, obs, state, words)


def param_count(words: Sequence[int]) -> int:
    """Parameters of one group's model from its `mlp_words`."""
    in_dim, layers, shared, _, logits, _, *widths = words
    dims = [in_dim, *widths]
    torso = sum(dims[i] * dims[i + 1] + dims[i + 1] for i in range(layers))
    last = dims[-1]
    return (1 if shared else 2) * torso + last * logits + logits + last + 1


def choice(policy: Policy, env: Any, sampler: str, sharded: bool, num_envs: int = 1) -> str:
    """The trainer's rollout for num_envs envs: "fused", or "step by step:
    <why>" (`why_not`, or where the step-by-step path measured faster: the
    cpu backend, where XLA:CPU's matmuls beat the kernel's loops, models over
    MAX_FUSED_PARAMS parameters per group, and launches of more than
    MAX_FUSED_WORK agents times parameters; docs/decisions.md)."""
    why = why_not(policy, env, sampler, sharded)
    if why is None and env.backend != "cuda":
        why = "the cpu backend (XLA:CPU's matmuls are faster there)"
    if why is None:
        g = next(iter(policy.groups.ids))
        n = param_count(mlp_words(policy.nets[g], env.obs_dim, 1))
        agents = num_envs * env.num_agents
        if n > MAX_FUSED_PARAMS:
            why = f"{n} parameters per group (fused up to {MAX_FUSED_PARAMS})"
        elif _past_work_limit(agents, n):
            why = (f"{agents} agents x {n} parameters a launch (fused up to "
                   f"{MAX_FUSED_WORK:.0e})")
    return "fused" if why is None else f"step by step: {why}"


def seeds_path(path: str, policy: Policy, env: Any, sampler: str, num_envs: int,
               seeds: int) -> str:
    """The rollout path (`choice`) of `seeds` seeds vmapped, whose envs fold
    into one launch, given one seed's path."""
    if path != "fused" or seeds == 1:
        return path
    return choice(policy, env, sampler, False, num_envs * seeds)


def plan(policy: Policy, env: Any, sums: EpisodeSums, sampler: str, sharded: bool,
         num_envs: int = 1) -> FusedRollout | None:
    """The fused rollout where `choice` picks it; None (the step-by-step scan)
    elsewhere. (The cpu backend runs the fused path too, through `build`:
    tests and the conformance of the two paths.)"""
    if choice(policy, env, sampler, sharded, num_envs) != "fused":
        return None
    return build(policy, env, sums)


def rollout_for(policy: Policy, env: Any, sums: EpisodeSums, sampler: str, sharded: bool,
                num_envs: int = 1) -> tuple[Any, str]:
    """(the trainer's rollout function, "fused" or "step by step: <why>")."""
    f = plan(policy, env, sums, sampler, sharded, num_envs)
    if f is not None:
        return f, "fused"
    why = choice(policy, env, sampler, sharded, num_envs)
    return rollout, why if why != "fused" else "step by step"


def build(policy: Policy, env: Any, sums: EpisodeSums) -> FusedRollout:
    """The fused rollout of `policy` on `env` (one that `why_not` lets through)."""
    ids = list(policy.groups.ids)
    group = np.zeros(env.num_agents, np.int32)
    for i, g in enumerate(ids):
        group[policy.groups.ids[g]] = i
    return FusedRollout(policy, env, sums, mlp_words(policy.nets[ids[0]], env.obs_dim, len(ids)),
                        group)
