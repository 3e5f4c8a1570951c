"""A run that cannot fit in memory, said in one line naming the config keys that
size it: before anything is allocated (`check_memory`, from shapes alone), and
when XLA runs out of memory compiling or running a chunk (`OutOfMemory`)."""

from __future__ import annotations

import shutil
from typing import Any

import jax
import numpy as np

from jaxwarp.errors import RunError, storage_fault
from jaxwarp.memory import memory_limit
from jaxwarp.run.state import Run


def run_bytes(run: Run) -> dict[str, int] | None:
    """A lower bound of what the run's arrays take, from shapes only, in bytes:
    "model" (parameters and optimiser state), "env" (the envs' state and
    observations) and "rollout" (one trajectory, num_envs x num_steps x agents x
    (an observation and 8 floats: action, log-prob, value, reward, done,
    advantage, return, mask)), for every run (seed, or setting x seed). None
    where the init fails (it reports that itself)."""
    keys = jax.ShapeDtypeStruct((run.members, 2), np.uint32)
    try:
        shapes = jax.eval_shape(jax.vmap(run.trainer.init), keys)
    except Exception:  # noqa: BLE001  (the init itself reports it, with its own message)
        return None

    def size(tree: Any) -> int:
        return sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize
                   for x in jax.tree.leaves(tree))

    c, agents = run.config, int(run.trainer.env.num_agents)
    return {"model": size((shapes.learner.params, shapes.learner.opt_state)),
            "env": size((shapes.envs.env_state, shapes.envs.obs)),
            "rollout": c.num_steps * (size(shapes.envs.obs)
                                      + run.members * c.num_envs * agents * 8 * 4)}


def check_memory(run: Run) -> None:
    """RunError naming the config keys when the run's arrays alone (`run_bytes`)
    cannot fit in the memory of its platform (`jaxwarp.memory.memory_limit`:
    the host's RAM, or the GPUs' together), before anything is allocated; for a
    sweep, how many of its runs would."""
    parts = run_bytes(run)
    backend = run.trainer.env.backend
    platform = {"cuda": "gpu", "cpu": "cpu"}.get(backend) or jax.default_backend()
    limit = memory_limit(platform)
    need = sum(parts.values()) if parts else 0
    if parts is None or limit is None or need <= limit:
        return
    c = run.config
    hidden = ", ".join(f"policies.{g}.hidden_sizes" for g, _ in c.policies) or "hidden_sizes"
    where = "the host's memory" if platform == "cpu" else f"the {platform} devices' memory"
    fit = int(limit * run.members // need)
    raise RunError(
        f"the run needs at least {need / 1e9:.1f} GB, more than {where} ({limit / 1e9:.1f} GB): "
        f"parameters and optimiser state {parts['model'] / 1e9:.1f} GB ({hidden}), env state "
        f"{parts['env'] / 1e9:.1f} GB (num_envs={c.num_envs}), one rollout "
        f"{parts['rollout'] / 1e9:.1f} GB (num_envs x num_steps={c.num_steps}) x "
        f"{_members(run)}; lower them"
        + (f" (at most {fit} of the sweep's {run.members} runs fit: split it into sweeps "
           "of fewer settings)" if run.settings and fit >= 1 else ""))


def out_of_memory_text(e: BaseException) -> str | None:
    """XLA's out-of-memory error (RESOURCE_EXHAUSTED, not a full disk) as one line."""
    if isinstance(e, RunError) or storage_fault(e) is not None:
        return None
    text = " ".join(str(e).split())
    if "RESOURCE_EXHAUSTED" not in text and not isinstance(e, MemoryError):
        return None
    return text[:200] + ("..." if len(text) > 200 else "")


class OutOfMemory:
    """XLA running out of device or host memory (compiling or running a chunk)
    as a one-line RunError naming the keys that size the run; a folder that
    this run created and that holds no checkpoint yet is removed (`run`: set
    once the run is started)."""

    def __init__(self) -> None:
        self.run: Run | None = None

    def __enter__(self) -> OutOfMemory:
        return self

    def __exit__(self, kind: Any, e: Any, tb: Any) -> bool:
        text = None if not isinstance(e, Exception) else out_of_memory_text(e)
        if text is None:
            return False
        run = self.run
        if run is not None and run.created and run.primary and run.saved_at is None:
            shutil.rmtree(run.out, ignore_errors=True)  # nothing of value in it yet
        raise RunError(f"out of memory ({text}); lower num_envs, num_steps or the policies' "
                       "hidden_sizes") from None


def _members(run: Run) -> str:
    """The runs trained together, as the memory message counts them."""
    seeds = f"{run.seeds} seed(s)"
    return f"{len(run.settings)} settings x {seeds}" if run.settings else seeds
