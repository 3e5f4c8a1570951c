"""Kernel variants for experiments, kept out of the product: each is a patch
here, applied to the source tree while an env is built and reverted after.

The build cache keys on the text of every header a build reads, so a
variant's library sits beside the shipped one and both can be timed side by
side in one process (experiments/bench_contract_envs.py --variant=NAME.patch).
Make the env inside the block: it is built, and its launch layout computed,
when it is made. A run killed inside the block leaves the patch applied;
`patch -p1 -R -i experiments/patches/NAME.patch` reverts it.

| patch | what it changes |
|---|---|
| obs_parts_only.patch | no observation rows staged in shared memory (kObsBudget = 0): parts straight to the output wherever an env has observe_part() |
| tag_ablate_features.patch | Tag writes every observation as zeros (time breakdown only: wrong observations) |
| tag_ablate_search.patch | as above, and Tag's team pass (the neighbour search with its compaction or grid build) is skipped |

Learner variants (Python: `git apply` one, time it in its own process, `git apply -R`; the
numbers are in docs/decisions.md, "The learner's tail" and "The heads' statistics in the forward
kernel"). The two `heads_` patches of `losses.head_stats` now change only groups on XLA's layers
(float32, 64-wide, the CPU): a group on the fused kernels takes its heads' statistics from the
forward kernel (`Policy.head_stats`), not from `losses.head_stats`:

| patch | what it changes |
|---|---|
| heads_autodiff.patch | the heads' log-probability and entropy differentiated by jax (the code before `losses.head_stats`) |
| heads_recompute.patch | `head_stats`'s backward recomputes the log-softmax from the logits instead of saving it |
| linear_relu.patch | XLA's layers: a ReLU hidden layer's custom gradient keeps the ReLU's output for the mask |
| heads_grad_in_kernel.patch | `fused_head_stats`' backward: the heads' columns' gradient made inside the backward kernel from the saved slab |
| heads_slab_masked.patch | `fused_head_stats`' backward: the heads' columns' gradient as masked passes over the whole width instead of per-head slices put together |

Rollout variant (Python, applied and timed the same way):

| patch | what it changes |
|---|---|
| rollout_obs_buffer.patch | the step-by-step rollout keeps the observations acted on in one [T, ...] buffer (step t reads row t, writes row t + 1; the last step after the scan), so no step copies the env's new observations into the scan's carry |

Model variant (Python, applied and timed the same way; measured with
`tools/peer_profile.py`, not shipped: docs/decisions.md, "A PPO minibatch's loss and gradient as
one kernel"):

| patch | what it changes |
|---|---|
| two_towers_block_diagonal.patch | XLA's layers of an `mlp` with separate actor and critic towers run as one block-diagonal network (the towers' units side by side, zeros off the diagonal): three matmuls a forward instead of six, none sliced between layers, twice the FLOPs of the layers after the first. On the CPU its outputs and gradients are within float rounding of the towers apart (float32: outputs 2e-7, gradients 3e-6 of their largest values; bfloat16 outputs equal). For CartPole's and MPE's float32 configs (the rollout and the learner) and the rollout of their bf16 forms |
"""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
from pathlib import Path
from typing import Iterator

PATCHES = Path(__file__).resolve().parent
ROOT = PATCHES.parent.parent


def available() -> list[str]:
    """The patch names this folder holds."""
    return sorted(p.name for p in PATCHES.glob("*.patch"))


def _patch(path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["patch", "-p1", "-s", "--no-backup-if-mismatch", "-d", str(ROOT),
                           "-i", str(path), *extra], capture_output=True, text=True)


@contextlib.contextmanager
def applied(name: str | None) -> Iterator[None]:
    """The tree with experiments/patches/`name` applied inside the block
    (None or "": the tree as it is)."""
    if not name:
        yield
        return
    path = PATCHES / name
    if not path.is_file():
        raise FileNotFoundError(f"no patch {name!r} in {PATCHES}; have {available()}")
    check = _patch(path, "-N", "--dry-run")
    if check.returncode != 0:
        raise RuntimeError(f"{name} does not apply to this tree (already applied, or the "
                           f"code moved): {check.stdout}{check.stderr}")
    _patch(path, "-N").check_returncode()
    try:
        yield
    finally:
        _patch(path, "-R").check_returncode()


@contextlib.contextmanager
def variant(spec: str | None) -> Iterator[None]:
    """One build variant of an experiment, in force inside the block (make
    the env there):

    * None or "": the tree as it is;
    * ``NAME.patch``: experiments/patches/NAME.patch applied (``applied``);
    * ``-...``: nvcc flags of the CUDA build (JAXWARP_NVCC_FLAGS, e.g.
      ``-lineinfo`` or ``-maxrregcount=48``);
    * ``MODULE.NAME=VALUE``: a constant of jaxwarp.envs.MODULE read when an
      env is made, e.g. ``tag_continuous.GRID_MIN_AGENTS=1`` (the grid search
      at every size).
    """
    if not spec:
        yield
    elif spec.endswith(".patch"):
        with applied(spec):
            yield
    elif spec.startswith("-"):
        saved = os.environ.get("JAXWARP_NVCC_FLAGS")
        os.environ["JAXWARP_NVCC_FLAGS"] = spec
        try:
            yield
        finally:
            if saved is None:
                os.environ.pop("JAXWARP_NVCC_FLAGS", None)
            else:
                os.environ["JAXWARP_NVCC_FLAGS"] = saved
    else:
        target, sep, value = spec.partition("=")
        module_name, _, name = target.rpartition(".")
        if not sep or not module_name:
            raise ValueError(f"variant {spec!r}: expected NAME.patch, -FLAGS or "
                             "MODULE.NAME=VALUE")
        module = importlib.import_module(f"jaxwarp.envs.{module_name}")
        if not hasattr(module, name):
            raise ValueError(f"variant {spec!r}: jaxwarp.envs.{module_name} has no {name}")
        saved = getattr(module, name)
        setattr(module, name, type(saved)(value))
        try:
            yield
        finally:
            setattr(module, name, saved)
