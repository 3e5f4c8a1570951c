"""Action sampling: one categorical draw per head from concatenated logits.

A MultiDiscrete policy emits, for every row (env, agent, ...), the logits of
all its action heads side by side: ``logits: f32[..., sum(nvec)]``, head ``h``
in columns ``[offset_h, offset_h + nvec[h])``. `sample_actions` draws one
action per head and returns the log-probability of the joint action. Three
backends compute the same draws:

* ``"cuda"``: one fused kernel (`cuda/sampler_kernels.cu`) through XLA FFI;
* ``"cpu"``: the same per-head C++ (`cuda/sampler.h`) on XLA:CPU;
* ``"jax"``: `reference_sample`, the definition:

      keys = jax.random.split(key, H)
      a_h  = jax.random.categorical(keys[h], logits_h, axis=-1, mode="low")
      log_prob = sum_h jax.nn.log_softmax(logits_h)[a_h]   (heads added in order)

The kernels reproduce jax's random bits exactly (Threefry-2x32 keyed by each
head's key, counters from the element's flat index within the head's
``[..., n_h]`` draw, under either setting of ``jax_threefry_partitionable``),
then jax's uniform -> Gumbel -> first-maximum argmax. ``logf`` and XLA's log
may differ in the last bit, so an action can differ from jax's only where two
perturbed logits tie to within about 1e-7 relative; log_prob agrees to float32
rounding (the exp-sum order differs).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp import _ffi
from jaxwarp.core import key_data_of, resolve_backend

MAX_HEADS = 32  # cuda/sampler.h: kMaxHeads


def sample_actions(key: jax.Array, logits: jax.Array, nvec: Sequence[int],
                   backend: str = "auto") -> tuple[jax.Array, jax.Array]:
    """Samples one action per head from concatenated per-head logits.

    Args:
        key: a single jax key (typed ``jax.random.key`` or raw u32[2] ``PRNGKey``).
            Under ``jax.vmap`` over keys, each batch member draws with its own key,
            exactly as a Python loop over the members would.
        logits: f32[..., sum(nvec)], heads concatenated in order; any leading
            shape (flattened into rows by the kernels). float16/bfloat16/float64
            are cast to float32 first (on every backend, so they stay equal).
            -inf masks a choice out (a head needs one finite logit).
        nvec: choices per head, ints >= 1, 1 to 32 heads.
        backend: "auto" (cuda if a GPU is present, else cpu), "cuda", "cpu" or "jax".

    Returns:
        actions: i32[..., len(nvec)], ``actions[..., h]`` in ``[0, nvec[h])``;
        log_prob: f32[...], ``sum_h log_softmax(logits_h)[actions[..., h]]``.
        log_prob is differentiable with respect to logits on every backend
        (the FFI backends through a custom JVP: ``onehot(a_h) - softmax(logits_h)``
        per head); actions have no gradient.
    """
    return sample_on(key, logits, nvec, resolve_backend(backend))


def sample_on(key: jax.Array, logits: jax.Array, nvec: Sequence[int], backend: str
              ) -> tuple[jax.Array, jax.Array]:
    """`sample_actions` on a backend resolved already ("cuda", "cpu" or "jax",
    as `jaxwarp.core.resolve_backend` gives it): for a sampler that resolves
    its backend once, when it is made (a run's: `jaxwarp.train.setup.make_sampler`).
    Same arguments and results as `sample_actions`."""
    nvec = check_nvec(nvec)
    logits = check_logits(logits, nvec)
    head_keys = _head_keys(key, key_data_of(key), len(nvec))
    if backend == "jax":
        return reference_sample(head_keys, logits, nvec)
    partitionable = bool(jax.config.jax_threefry_partitionable)
    if not partitionable:
        rows = int(np.prod(logits.shape[:-1], dtype=np.int64))
        if rows * max(nvec) >= 2**32 - 1:
            raise ValueError(
                f"sample_actions: with jax_threefry_partitionable=False, jax draws more than "
                f"2**32 - 1 elements per head in blocks that backend={backend!r} does not "
                f"reproduce; got {rows} rows x {max(nvec)} choices. Use backend='jax' or "
                "enable jax_threefry_partitionable (the default since jax 0.5).")
    return _sample_ffi(nvec, backend, partitionable, jax.random.key_data(head_keys), logits)


@functools.partial(jax.jit, static_argnames="nvec")  # one program when called eagerly
def reference_sample(head_keys: jax.Array, logits: jax.Array, nvec: tuple[int, ...]
                     ) -> tuple[jax.Array, jax.Array]:
    """Pure-JAX sampler (the definition). head_keys: typed key[H]; logits: f32[..., sum(nvec)]."""
    bounds = np.cumsum(nvec)[:-1].tolist()
    actions, log_prob = [], None
    for k, x in zip(head_keys, jnp.split(logits, bounds, axis=-1)):
        # mode="low" is jax's default; pinned so that the global
        # jax_high_dynamic_range_gumbel flag cannot change the definition.
        a = jax.random.categorical(k, x, axis=-1, mode="low").astype(jnp.int32)
        lp = jnp.take_along_axis(jax.nn.log_softmax(x, axis=-1), a[..., None], axis=-1)[..., 0]
        actions.append(a)
        log_prob = lp if log_prob is None else log_prob + lp
    return jnp.stack(actions, axis=-1), log_prob


def _head_keys(key: jax.Array, key_data: jax.Array, num_heads: int) -> jax.Array:
    """typed key[H]: ``jax.random.split(key, H)`` of a typed or raw key."""
    if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.wrap_key_data(key_data, impl="threefry2x32")
    return jax.random.split(key, num_heads)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1, 2))
def _sample_ffi(nvec: tuple[int, ...], backend: str, partitionable: bool,
                head_keys: jax.Array, logits: jax.Array) -> tuple[jax.Array, jax.Array]:
    """FFI call. head_keys: u32[H, 2]; logits: f32[..., sum(nvec)].

    With a leading (env) axis, the call carries the partitioning rule of
    `jaxwarp._ffi.env_partitioned_call`: under jit with logits split along
    axis 0, each device samples its own rows in one launch, from their
    global row index (the row offset), so the draws are the unsharded ones.
    """
    call = functools.partial(_sample_call, nvec, backend, partitionable, logits.shape[0]
                             if logits.ndim >= 2 else 1)
    if logits.ndim < 2:
        actions, log_prob = call(None, 1, head_keys, logits)
    else:
        actions, log_prob = _ffi.env_partitioned_call(
            call, (head_keys, logits), (False, True), logits.shape[0],
            "jaxwarp_sample_categorical")
    # In a scan that stacks log_prob (a rollout), XLA:GPU's dynamic-slice
    # fusion would otherwise clone the call to write log_prob straight into
    # the stacked buffer, and run the sampler twice per step (measured on the
    # H100: 100 launches for 50 steps). Consumers cannot fuse into a custom
    # call anyway, so the barrier costs nothing.
    return jax.lax.optimization_barrier((actions, log_prob))


def _sample_call(nvec: tuple[int, ...], backend: str, partitionable: bool, num_envs: int,
                 offset: jax.Array | None, local_envs: int, head_keys: jax.Array,
                 logits: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The FFI call over ``local_envs`` of the ``num_envs`` entries of the
    logits' first row axis. head_keys: u32[..., H, 2] and logits
    f32[..., local_envs, ..., sum(nvec)] with the same leading vmap axes (0
    or more); offset: None or u32[], the global index of this call's first
    entry of that axis."""
    batch = tuple(head_keys.shape[:-2])
    rows_shape = tuple(logits.shape[len(batch):-1])
    per_env = int(np.prod(rows_shape[1:], dtype=np.int64))
    draw_rows = num_envs * per_env  # rows per member of the whole draw
    if offset is None:
        row_offset = jnp.zeros(batch, jnp.uint32)
    else:
        if draw_rows > 2**32:
            raise ValueError(f"sample_actions: a sharded draw takes at most 2**32 rows per key; "
                             f"got {draw_rows}")
        row_offset = jnp.broadcast_to(offset * np.uint32(per_env), batch)
    out_types = (jax.ShapeDtypeStruct(tuple(logits.shape[:-1]) + (len(nvec),), jnp.int32),
                 jax.ShapeDtypeStruct(tuple(logits.shape[:-1]), jnp.float32))
    # broadcast_all folds vmap's batch into the rows, the keys into
    # u32[members, H, 2] and the row offsets into u32[members]; the kernels
    # count each member's draws from its own first row plus its row offset,
    # in a draw of draw_rows rows (ffi/sampler_ffi.h: Layout).
    return tuple(jax.ffi.ffi_call(
        f"jaxwarp_sample_categorical_{backend}", out_types, vmap_method="broadcast_all",
    )(head_keys, logits, row_offset, nvec=np.asarray(nvec, np.int32),
      partitionable=np.int32(partitionable), draw_rows=np.int64(draw_rows)))


@_sample_ffi.defjvp
def _sample_ffi_jvp(nvec, backend, partitionable, primals, tangents):
    head_keys, logits = primals
    _, dlogits = tangents
    actions, log_prob = _sample_ffi(nvec, backend, partitionable, head_keys, logits)
    # d log_softmax(x)[a] = dx[a] - <softmax(x), dx>, summed over heads.
    bounds = np.cumsum(nvec)[:-1].tolist()
    dlp = None
    for h, (x, dx) in enumerate(zip(jnp.split(logits, bounds, axis=-1),
                                    jnp.split(dlogits, bounds, axis=-1))):
        d = (jnp.take_along_axis(dx, actions[..., h:h + 1], axis=-1)[..., 0]
             - jnp.sum(jax.nn.softmax(x, axis=-1) * dx, axis=-1))
        dlp = d if dlp is None else dlp + d
    return (actions, log_prob), (np.zeros(actions.shape, jax.dtypes.float0), dlp)


def check_nvec(nvec: Sequence[int]) -> tuple[int, ...]:
    if isinstance(nvec, (np.ndarray, jax.Array)):
        if nvec.ndim != 1:
            raise ValueError(f"nvec must be a 1-D sequence of ints; got shape {nvec.shape}")
        nvec = np.asarray(nvec).tolist()
    if isinstance(nvec, (str, bytes)) or not isinstance(nvec, Sequence):
        raise TypeError(f"nvec must be a sequence of ints (choices per head); got "
                        f"{type(nvec).__name__}")
    out = []
    for n in nvec:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise TypeError(f"nvec must hold ints; got {n!r} ({type(n).__name__}) in {nvec!r}")
        if n < 1:
            raise ValueError(f"nvec entries must be >= 1 (choices per head); got {list(nvec)}")
        out.append(int(n))
    if not 1 <= len(out) <= MAX_HEADS:
        raise ValueError(f"nvec must hold 1 to {MAX_HEADS} heads; got {len(out)}")
    if sum(out) >= 2**31:
        raise ValueError(f"sum(nvec) must be < 2**31; got {sum(out)}")
    return tuple(out)


def check_logits(logits: jax.Array, nvec: tuple[int, ...]) -> jax.Array:
    if not hasattr(logits, "dtype") or not hasattr(logits, "shape"):
        raise TypeError(f"logits must be an array f32[..., sum(nvec)]; got "
                        f"{type(logits).__name__}")
    if not jnp.issubdtype(logits.dtype, jnp.floating):
        raise TypeError(f"logits must have a floating dtype (float32; float16, bfloat16 and "
                        f"float64 are cast to float32); got {logits.dtype}")
    if logits.ndim < 1 or logits.shape[-1] != sum(nvec):
        raise ValueError(f"logits must have shape [..., sum(nvec) = {sum(nvec)}] for "
                         f"nvec={list(nvec)}; got shape {tuple(logits.shape)}")
    return jnp.asarray(logits, jnp.float32)
