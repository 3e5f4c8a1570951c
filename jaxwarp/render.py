"""Rendering rollouts of the built-in envs to RGB frames and GIFs.

    states = rollout_states(env, jax.random.key(0), num_envs=4, steps=100)
    frames = render_frames(env, states, env_index=0)   # u8[101, 128, 128, 3]
    episode = rollout_states(env, jax.random.key(0), num_envs=1)  # one whole episode
    write_gif(frames, "rollout.gif", fps=20)

Frames are drawn on the device with `jnp` ops (every shape is a filled
capsule: a disc, or a thick segment, painted in order over a white
background), vmapped over time, so a whole rollout renders inside ``jit``.
World ``y`` points up in the image. What an env looks like is the env's own:
its spec's ``render_view(params)`` (the square of the world drawn) and
``render_draw(params, state, canvas)`` (its shapes on a `Canvas`); this module
draws any env that declares them. `legend(env, state)` names the colours of
that drawing (agents by their policy group), for the GIFs' headers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Canvas", "legend", "render_frames", "rollout_states", "world_to_pixel", "write_gif"]

BACKGROUND = (255, 255, 255)
RED = (220, 40, 40)  # taggers, adversaries
BLUE = (40, 80, 220)  # runners, spread agents
GREEN = (40, 170, 70)  # simple_tag good agents
GREY = (150, 150, 150)  # landmarks, ground, track
DARK = (40, 40, 40)  # obstacles, cart, links
ORANGE = (210, 130, 40)  # poles, pendulum, car

class Canvas:
    """What an env's drawing hook (`EnvSpec.render_draw`) paints on: filled
    capsules (a disc, or a thick segment) in world units, painted in the
    order they are added.

    px: world units per pixel (a hook may keep small shapes at least a pixel
    or two wide: ``max(0.05, 2 * canvas.px)``). Coordinates and radii are
    Python floats or f32 arrays (one shape per element); colour an RGB triple;
    visible a bool or bool array (hidden shapes are not painted); label, where
    given, what the shapes are in the GIFs' legend (`legend`; without one the
    legend names them itself)."""

    def __init__(self, px: float):
        self.px = px
        self.parts: list[tuple] = []
        self.labels: list[str | None] = []  # one per part

    def segment(self, ax, ay, bx, by, r, colour, visible=True, label: str | None = None) -> None:
        """A thick segment from (ax, ay) to (bx, by), radius r."""
        ax = jnp.atleast_1d(jnp.asarray(ax, jnp.float32))
        n = ax.shape[0]
        f = lambda v: jnp.broadcast_to(jnp.asarray(v, jnp.float32), (n,))
        self.parts.append((ax, f(ay), f(bx), f(by), f(r), _col(colour, n),
                           jnp.broadcast_to(jnp.asarray(visible, bool), (n,))))
        self.labels.append(label)

    def disc(self, x, y, r, colour, visible=True, label: str | None = None) -> None:
        """A disc of radius r at (x, y)."""
        self.segment(x, y, x, y, r, colour, visible, label)

    def primitives(self) -> tuple[jax.Array, ...]:
        """(ax, ay, bx, by, r, colour[D, 3], visible[D]) of every shape, in order."""
        return tuple(jnp.concatenate([q[i] for q in self.parts]) for i in range(7))


def _env_name(env: Any) -> str:
    spec = getattr(env, "spec", None)
    name = getattr(spec, "name", None) or getattr(env, "name", None)
    return str(name) if name is not None else type(env).__name__


def _hooks(env: Any) -> tuple[Callable, Callable]:
    """(render_view, render_draw) of the env's spec; ValueError naming the env
    when it declares none."""
    spec = getattr(env, "spec", None)
    view, draw = getattr(spec, "render_view", None), getattr(spec, "render_draw", None)
    if view is None or draw is None:
        raise ValueError(f"render: env {_env_name(env)!r} declares no drawing (its EnvSpec's "
                         "render_view and render_draw; see docs/custom_env.md)")
    return view, draw


def check_renderable(env: Any) -> None:
    """Raises ValueError naming the env when there is no drawing for it."""
    _hooks(env)


def _bounds(env: Any) -> tuple[float, float, float, float]:
    """(xmin, xmax, ymin, ymax) of the image in world units (square)."""
    view, _ = _hooks(env)
    return tuple(float(v) for v in view(env.params))


def world_to_pixel(env: Any, x: float, y: float, size: int = 128) -> tuple[int, int]:
    """(row, col) of the pixel whose square holds world point (x, y)."""
    xmin, xmax, ymin, ymax = _bounds(env)
    col = int(np.floor((x - xmin) / (xmax - xmin) * size))
    row = int(np.floor((ymax - y) / (ymax - ymin) * size))
    return min(max(row, 0), size - 1), min(max(col, 0), size - 1)


def _col(c, n: int) -> jax.Array:
    return jnp.broadcast_to(jnp.asarray(c, jnp.float32), (n, 3))


def _prims(env: Any, s: dict[str, jax.Array], px: float):
    """Primitives of one frame: (ax, ay, bx, by, r, colour[D, 3], visible[D]).

    s: the env's state fields for one env at one time (per-agent fields f[n]);
    px: world units per pixel."""
    _, draw = _hooks(env)
    canvas = Canvas(px)
    draw(env.params, s, canvas)
    return canvas.primitives()


def _rasterize(prims, bounds, size: int) -> jax.Array:
    """u8[size, size, 3]: the primitives painted in order over the background."""
    xmin, xmax, ymin, ymax = bounds
    c = (jnp.arange(size, dtype=jnp.float32) + 0.5) / size
    px = xmin + c * (xmax - xmin)  # pixel centres, columns
    py = ymax - c * (ymax - ymin)  # rows, y up
    gx, gy = px[None, :], py[:, None]
    img0 = jnp.broadcast_to(jnp.asarray(BACKGROUND, jnp.float32), (size, size, 3))

    def paint(img, prim):
        ax, ay, bx, by, r, colour, vis = prim
        dx, dy = bx - ax, by - ay
        den = dx * dx + dy * dy
        t = jnp.where(den > 0, ((gx - ax) * dx + (gy - ay) * dy) / jnp.where(den > 0, den, 1.0),
                      0.0)
        t = jnp.clip(t, 0.0, 1.0)
        ex, ey = gx - (ax + t * dx), gy - (ay + t * dy)
        inside = (ex * ex + ey * ey <= r * r) & vis
        return jnp.where(inside[..., None], colour, img), None

    img, _ = jax.lax.scan(paint, img0, prims)
    return img.astype(jnp.uint8)


def render_frames(env: Any, states: Any, env_index: int = 0, size: int = 128) -> jax.Array:
    """u8[T, size, size, 3]: one env's rollout drawn frame by frame.

    Args:
        env: an env from `jaxwarp.make` (its spec's render hooks draw it).
        states: the env's state pytree with a leading time axis, fields
            ``[T, num_envs, ...]`` (e.g. from `rollout_states`).
        env_index: which env of the batch to draw.
        size: image height and width in pixels.

    Jittable (``jax.jit(lambda s: render_frames(env, s))``). Raises ValueError
    for an env that declares no drawing.
    """
    bounds = _bounds(env)  # raises for unknown envs
    px = (bounds[1] - bounds[0]) / size
    fields = {k: v[:, env_index] for k, v in vars(states).items()
              if isinstance(v, jax.Array) and v.ndim >= 2}

    def frame(s):
        return _rasterize(_prims(env, s, px), bounds, size)

    return jax.vmap(frame)(fields)


def _one_state(env: Any, states: Any, env_index: int) -> dict[str, jax.Array]:
    """The drawing's input for env `env_index` at time 0 of `states` (fields
    [T, num_envs, ...]), as `render_frames` passes it."""
    return {k: v[0, env_index] for k, v in vars(states).items()
            if isinstance(v, jax.Array) and v.ndim >= 2}


def _moved(env: Any, s: dict[str, jax.Array], base: tuple, px: float, field: str,
           at: Any = None) -> jax.Array:
    """bool[D]: the shapes of the drawing that change when state field `field`
    changes (at index `at` of its agent axis, or all of it): geometry or
    visibility."""
    v = s[field]
    bump = ~v if v.dtype == bool else v + jnp.asarray(1 if jnp.issubdtype(v.dtype, jnp.integer)
                                                      else 0.5, v.dtype)
    if at is not None:
        bump = v.at[at].set(bump[at])
    prims = _prims(env, {**s, field: bump}, px)
    changed = [prims[i] != base[i] for i in (0, 1, 2, 3, 4, 6)]
    return jnp.any(jnp.stack(changed), axis=0)


def legend(env: Any, states: Any, env_index: int = 0) -> list[tuple[str, tuple[int, int, int]]]:
    """[(label, (r, g, b))]: what each colour of the env's drawing shows, one
    entry per (label, colour), the agents' groups first (in the env's
    ``policy_groups`` order), then the other shapes in drawing order. Empty
    for a single-agent env.

    states: the env's state pytree, fields ``[T, num_envs, ...]`` (as
    `render_frames` takes), read at time 0 of env `env_index`. A shape is named
    by, the first that applies:
      1. its drawing (``canvas.disc(..., label="landmark")``);
      2. its agent's policy group (``env.policy_groups``; ``agent`` for an env
         that declares none): the shapes that move with agent j's position, the
         state fields ``x`` and ``y`` (per agent) that every multi-agent
         built-in env keeps, are agent j's;
      3. the state fields it is drawn from (the shapes that change with a
         field), by their common stem: ``lm`` for ``lm_x`` and ``lm_y``.
    Shapes that no state field moves (drawn from the params alone) are left out.
    """
    if env.num_agents < 2:
        return []
    _, draw = _hooks(env)
    s = _one_state(env, states, env_index)
    xmin, xmax, _, _ = _bounds(env)
    px = (xmax - xmin) / 128
    canvas = Canvas(px)
    draw(env.params, s, canvas)
    named = [canvas.labels[i] for i, p in enumerate(canvas.parts) for _ in range(len(p[0]))]
    pos = [f for f in ("x", "y") if f in s and s[f].shape == (env.num_agents,)]
    names = list(s)  # (jit hands the dict over with its keys sorted)

    @jax.jit
    def probe(s):
        base = _prims(env, s, px)
        agents = (jax.vmap(lambda j: _moved(env, s, base, px, "x", j)
                           | _moved(env, s, base, px, "y", j))(jnp.arange(env.num_agents))
                  if len(pos) == 2 else jnp.zeros((0, len(named)), bool))  # bool[agents, D]
        fields = jnp.stack([_moved(env, s, base, px, f) for f in names])  # bool[fields, D]
        return base[5], agents, fields

    rgb, agents, fields = (np.asarray(a) for a in probe(s))
    colours = [tuple(round(float(c)) for c in v) for v in rgb]
    groups = dict(getattr(env, "policy_groups", None) or {"agent": np.arange(env.num_agents)})
    group_of = {int(j): g for g, ids in groups.items() for j in np.asarray(ids)}
    owner: list[str | None] = [None] * len(named)
    for j, e in zip(*np.nonzero(agents)):  # 2. agents (in order: the first one wins)
        owner[e] = owner[e] or group_of[int(j)]
    drawn_from = [{names[f] for f in np.flatnonzero(fields[:, e])} for e in range(len(named))]
    entries: dict[tuple[str, tuple[int, int, int]], int] = {}
    order = {g: i for i, g in enumerate(groups)}
    for e, colour in enumerate(colours):
        label = named[e] or owner[e] or (_stem(drawn_from[e]) if drawn_from[e] else None)
        if label is not None and (label, colour) not in entries:
            rank = order[label] if named[e] is None and owner[e] is not None else len(order)
            entries[(label, colour)] = rank
    return sorted(entries, key=lambda k: entries[k])  # stable: drawing order within a rank


def _stem(fields: set[str]) -> str:
    """The common stem of state field names: ``lm`` of lm_x and lm_y, the name of one."""
    names = sorted(fields)
    if len(names) == 1:
        return names[0]
    stem = names[0]
    for n in names[1:]:
        while not n.startswith(stem):
            stem = stem[:-1]
    return stem.rstrip("_") or ", ".join(names)


def render_batch(env: Any, state: Any, size: int = 128) -> jax.Array:
    """u8[num_envs, size, size, 3]: the current frame of every env of a batch.

    state: the env's state pytree, fields ``[num_envs, ...]`` (as returned by
    `reset`/`step`). Jittable; the adapters' ``render()`` calls it.
    """
    timed = jax.tree.map(lambda x: x[None], state)  # one time step
    num_envs = jax.tree.leaves(state)[0].shape[0]
    draw = lambda e: render_frames(env, timed, env_index=e, size=size)[0]
    return jax.vmap(draw)(jnp.arange(num_envs))


def batch_renderer(env: Any, size: int = 128) -> Callable[[Any], jax.Array]:
    """Jitted ``state -> u8[num_envs, size, size, 3]`` (`render_batch`), what
    the adapters' ``render()`` call; ValueError now for an env with no drawing."""
    check_renderable(env)
    return jax.jit(lambda state: render_batch(env, state, size))


def rollout_states(env: Any, key: jax.Array, num_envs: int, steps: int | None = None,
                   policy: Callable[[jax.Array, jax.Array, Any], jax.Array] | None = None) -> Any:
    """The reset state and the state after each of `steps` steps, stacked:
    fields ``[steps + 1, num_envs, ...]``. One jitted `lax.scan`.

    steps: None for one episode: `jaxwarp.core.episode_length(env)` steps,
    the last one without auto-reset, so that the final frame is the state the
    episode ends in rather than the next episode's start (an env that ends
    sooner restarts as usual and is left as it ends at the last step). Finished
    envs restart inside every other step.
    policy(key, obs, state) -> i32[num_envs, num_agents, heads]; None: uniform
    random actions. A policy with memory (``jaxwarp.run.evaluate.RunPolicy``,
    recurrent models) has ``initial_carry(num_envs)`` and is called
    ``actions, carry = policy(key, obs, state, carry, first)``, first bool[num_envs]
    marking the envs whose obs begins an episode.
    """
    from jaxwarp.core import episode_length

    one_episode = steps is None
    if one_episode:
        steps = episode_length(env)
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"rollout_states: steps must be None or an int >= 0; got {steps!r}")
    nvec = jnp.asarray(env.action_space.nvec, jnp.int32)
    n = env.num_agents

    def random_policy(k, obs, state):
        return jax.random.randint(k, (num_envs, n, nvec.shape[0]), 0, nvec)

    act = policy or random_policy
    memory = callable(getattr(act, "initial_carry", None))

    @jax.jit
    def run(key):
        k0, key = jax.random.split(key)
        obs, state = env.reset(k0, num_envs)
        mem = (act.initial_carry(num_envs), jnp.ones((num_envs,), bool)) if memory else None

        def body(carry, k, autoreset=True):
            obs, state, mem = carry
            ka, ks = jax.random.split(k)
            if memory:
                a, m = act(ka, obs, state, *mem)
            else:
                a = act(ka, obs, state)
            # (autoreset= only where needed: a user env's step may not take it)
            obs, state, _, done, _ = (env.step(ks, state, a) if autoreset
                                      else env.step(ks, state, a, autoreset=False))
            return (obs, state, (m, done) if memory else None), state

        keys = jax.random.split(key, steps)
        last = 1 if one_episode and steps > 0 else 0
        carry, traj = jax.lax.scan(body, (obs, state, mem), keys[:steps - last])
        parts = [jax.tree.map(lambda a: a[None], state), traj]
        if last:
            _, final = body(carry, keys[-1], autoreset=False)
            parts.append(jax.tree.map(lambda a: a[None], final))
        return jax.tree.map(lambda *a: jnp.concatenate(a), *parts)

    return run(key)


def write_gif(frames: Any, path: str | Path, fps: float = 20) -> Path:
    """Writes u8[T, H, W, 3] frames as a looping GIF (Pillow); returns the path.
    Written beside `path` and renamed over it: the old file or the whole new
    one, never a part of one, and a link at `path` is replaced, not followed."""
    from PIL import Image

    from jaxwarp.storage import replacing

    arr = np.asarray(frames)
    if arr.ndim != 4 or arr.shape[-1] != 3 or arr.dtype != np.uint8 or arr.shape[0] < 1:
        raise ValueError(f"write_gif: frames must be u8[T, H, W, 3] with T >= 1; got "
                         f"{arr.dtype}{list(arr.shape)}")
    if not fps > 0:
        raise ValueError(f"write_gif: fps must be > 0; got {fps}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arr = arr.copy()
    for t in range(1, arr.shape[0]):  # Pillow merges identical consecutive frames: keep
        if np.array_equal(arr[t], arr[t - 1]):  # one per step (one pixel off by one level)
            arr[t, 0, 0, 0] ^= 1
    images = [Image.fromarray(f) for f in arr]
    with replacing(path) as f:  # a failed write (a full disk) leaves no part of a GIF
        images[0].save(f, format="GIF", save_all=True, append_images=images[1:],
                       duration=max(round(1000 / fps), 10), loop=0, optimize=False)
    return path
