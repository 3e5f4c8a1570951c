"""PyTorch adapter: a jaxwarp env batch with torch tensors in and out, through DLPack.

    from jaxwarp.adapters.torch import TorchVectorEnv
    envs = TorchVectorEnv.make("cartpole", num_envs=8, backend="cpu")
    obs, info = envs.reset(seed=0)                     # torch f32[8, 4]
    obs, reward, terminated, truncated, info = envs.step(actions)  # actions: int tensor [8]

Tensors live on the env's device (`device`: the CPU for backends "cpu" and,
on a CPU-only JAX, "jax"; the GPU for "cuda"). Outputs are the jitted
step's own buffers handed over with ``torch.from_dlpack`` (no copy), inputs
go in with ``jax.dlpack.from_dlpack`` (no copy when the tensor is int32,
contiguous and suitably aligned; an int64 action tensor is cast to int32 by
torch first). Each step is one jitted call; the state stays on the device
(`jaxwarp.adapters._batched` has the key schedule and the layout).

Observations keep the env's dtype (`TorchVectorEnv.obs_dtype`): float32, or
``torch.bfloat16`` for an env made with ``obs_dtype="bfloat16"`` (torch has
the type, and a cast would cost the bf16 env its halved bytes; the
Gymnasium and PettingZoo adapters cast to float32 for NumPy). Seeds are ints
in [0, 2**64), all 64 bits significant (`jaxwarp.adapters._batched.seed_key`).

Autoreset happens inside `step` (Gymnasium's same-step mode): for a done env
the returned obs is the next episode's first observation; with
``final_obs=True`` info also holds ``"final_obs"``, the observation each env
ended in (see docs/adapters.md).
"""

from __future__ import annotations

from typing import Any

import jax
import torch

from jaxwarp.adapters._batched import BatchedEnv


def to_torch(x: jax.Array) -> torch.Tensor:
    """A jax array as a torch tensor on the same device, sharing its buffer."""
    return torch.from_dlpack(x)


def from_torch(t: torch.Tensor) -> jax.Array:
    """A torch tensor as a jax array on the same device (no copy where possible)."""
    return jax.dlpack.from_dlpack(t.contiguous())


class TorchVectorEnv:
    """``num_envs`` copies of a jaxwarp env, stepped with torch tensors.

    Args:
        env: a jaxwarp env (`jaxwarp.make(name, backend=...)`).
        num_envs: batch size.
        squeeze_agent: drop the agent axis of single-agent envs (default).
        final_obs: also return ``info["final_obs"]`` (a tensor shaped as obs:
            where terminated | truncated the observation the episode ended in,
            elsewhere equal to obs); costs a second env step on steps where
            an episode ends.

    Shapes (single-agent, squeezed): ``obs: f32[envs, obs_dim]`` (dtype
    `obs_dtype`: bf16 for an env made with ``obs_dtype="bfloat16"``),
    ``reward: f32[envs]``, actions ``[envs]`` (one action head) or
    ``[envs, heads]``; otherwise ``obs: f32[envs, agents, obs_dim]``,
    ``reward: f32[envs, agents]``, actions ``[envs, agents, heads]``.
    ``terminated, truncated: bool[envs]``. info: ``{"episode_return":
    f32[envs(, agents)]}``: the return of the episode that ended where
    terminated | truncated, 0 elsewhere (absent if the env keeps no
    ``episode_return``).
    """

    def __init__(self, env: Any, num_envs: int, squeeze_agent: bool = True,
                 final_obs: bool = False):
        self.env = env
        self._batch = BatchedEnv(env, num_envs, squeeze_agent=squeeze_agent,
                                 final_obs=final_obs)
        self.num_envs = self._batch.num_envs
        self.action_shape = self._batch.action_shape
        self.obs_shape = self._batch.obs_shape
        self.nvec = self._batch.nvec
        # torch.float32 or torch.bfloat16: the env's obs_dtype, kept as is.
        self.obs_dtype: torch.dtype = getattr(torch, self._batch.obs_dtype.name)
        dev = self._batch.device
        self.device = torch.device("cuda", dev.id) if dev.platform == "gpu" \
            else torch.device("cpu")

    @classmethod
    def make(cls, name: str, num_envs: int, backend: str = "auto", *,
             squeeze_agent: bool = True, config: str | None = None, final_obs: bool = False,
             **params: Any) -> TorchVectorEnv:
        """`TorchVectorEnv` over ``jaxwarp.make(name, backend, config, **params)``."""
        import jaxwarp

        return cls(jaxwarp.make(name, backend=backend, config=config, **params), num_envs,
                   squeeze_agent=squeeze_agent, final_obs=final_obs)

    def reset(self, seed: int | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
        """Resets every env; seed: an int in [0, 2**64) (new key, `seed_key`) or
        None (continue). Returns (obs, {})."""
        return to_torch(self._batch.reset(seed=seed)), {}

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                   torch.Tensor, dict[str, torch.Tensor]]:
        """One step of every env (one jitted call).

        actions: integer tensor of shape ``(num_envs, *action_shape)`` on
        `device`; values are not range-checked here (that would sync the
        device): out-of-range actions are the env's to handle, or pass
        ``checks=True`` to `jaxwarp.make`.
        """
        if not isinstance(actions, torch.Tensor):
            raise TypeError(f"actions must be a torch.Tensor; got {type(actions).__name__}")
        want = (self.num_envs, *self.action_shape)
        if tuple(actions.shape) != want:
            raise ValueError(f"actions must have shape {want}; got {tuple(actions.shape)}")
        if actions.dtype.is_floating_point or actions.dtype.is_complex \
                or actions.dtype == torch.bool:
            raise TypeError(f"actions must be an integer tensor; got {actions.dtype}")
        if actions.device != self.device:
            raise ValueError(f"actions are on {actions.device}; the env runs on {self.device}")
        if actions.dtype != torch.int32:
            actions = actions.to(torch.int32)
        out = self._batch.step(from_torch(actions))
        info = {} if out.final_return is None else {"episode_return":
                                                    to_torch(out.final_return)}
        if out.final_obs is not None:
            info["final_obs"] = to_torch(out.final_obs)
        return (to_torch(out.obs), to_torch(out.reward), to_torch(out.terminated),
                to_torch(out.truncated), info)

    def close(self) -> None:
        self._batch.close()
