"""jaxwarp.render: frames drawn in JAX, GIFs, and `jaxwarp render` (CPU, fast)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image

import jaxwarp
from jaxwarp.cli import main as cli_main
from jaxwarp.render import (
    BACKGROUND,
    BLUE,
    DARK,
    GREEN,
    RED,
    Canvas,
    legend,
    render_frames,
    rollout_states,
    world_to_pixel,
    write_gif,
)

SIZE = 64


def _tag_state(env, tagger_xy, runner_xy, runner_in_game):
    """A hand-made one-step, one-env Tag state: fields [T=1, envs=1, agents]."""
    _, s = env.reset(jax.random.key(0), 1)
    x = jnp.array([[tagger_xy[0], runner_xy[0]]], jnp.float32)
    y = jnp.array([[tagger_xy[1], runner_xy[1]]], jnp.float32)
    alive = jnp.array([[1, int(runner_in_game)]], jnp.int32)
    s = s.replace(x=x, y=y, still_in_game=alive)
    return jax.tree.map(lambda a: a[None], s)


@pytest.fixture(scope="module")
def tag_env():
    return jaxwarp.make("tag_continuous", backend="jax", num_taggers=1, num_runners=1,
                        grid_length=20.0, num_other_agents_observed=1)


def test_known_position_lands_on_known_pixel(tag_env):
    states = _tag_state(tag_env, (5.0, 15.0), (14.0, 4.0), runner_in_game=True)
    frames = np.asarray(render_frames(tag_env, states, size=SIZE))
    assert frames.dtype == np.uint8 and frames.shape == (1, SIZE, SIZE, 3)
    r, c = world_to_pixel(tag_env, 5.0, 15.0, SIZE)
    assert r < SIZE // 2 and c < SIZE // 2  # y up: a high y is near the top
    assert tuple(frames[0, r, c]) == RED
    rr, rc = world_to_pixel(tag_env, 14.0, 4.0, SIZE)
    assert tuple(frames[0, rr, rc]) == BLUE
    assert tuple(frames[0, r, SIZE - 1 - c]) == BACKGROUND
    assert tuple(frames[0, 0, 0]) == BACKGROUND
    colours = {tuple(v) for v in frames[0].reshape(-1, 3)}
    assert colours == {RED, BLUE, BACKGROUND}
    # an out-of-game runner is not drawn
    gone = np.asarray(render_frames(tag_env, _tag_state(tag_env, (5.0, 15.0), (14.0, 4.0), False),
                                    size=SIZE))
    assert tuple(gone[0, rr, rc]) == BACKGROUND and tuple(gone[0, r, c]) == RED


def test_rollout_shapes_and_jit(tag_env):
    states = rollout_states(tag_env, jax.random.key(1), num_envs=3, steps=4)
    assert states.x.shape == (5, 3, 2)
    frames = jax.jit(lambda s: render_frames(tag_env, s, env_index=2, size=SIZE))(states)
    assert frames.dtype == jnp.uint8 and frames.shape == (5, SIZE, SIZE, 3)
    eager = render_frames(tag_env, states, env_index=2, size=SIZE)
    np.testing.assert_array_equal(np.asarray(frames), np.asarray(eager))
    # a custom policy: all zeros
    zero = lambda k, obs, s: jnp.zeros((3, 2, 2), jnp.int32)
    assert rollout_states(tag_env, jax.random.key(1), 3, 2, policy=zero).x.shape == (3, 3, 2)


@pytest.mark.parametrize("name", jaxwarp.registered_envs())
def test_every_registered_env_renders(name):
    env = jaxwarp.make(name, backend="jax")
    states = rollout_states(env, jax.random.key(0), num_envs=2, steps=3)
    frames = np.asarray(render_frames(env, states, env_index=1, size=SIZE))
    assert frames.dtype == np.uint8 and frames.shape == (4, SIZE, SIZE, 3)
    drawn = (frames != np.array(BACKGROUND, np.uint8)).any(-1)
    assert drawn.any(axis=(1, 2)).all(), "every frame draws something"
    assert (~drawn).mean() > 0.3, "mostly background"


@pytest.mark.parametrize("name", jaxwarp.registered_envs())
def test_shapes_keep_their_share_of_a_larger_frame(name):
    """--size 512 draws what --size 128 does, four times as wide: the agents of
    the multi-agent envs (points in tag_continuous, cells in tag_gridworld)
    cover the same share of the picture, not a fixed few pixels; the classic
    envs' hairlines (at least a pixel wide) may thin, their bodies not."""
    env = jaxwarp.make(name, backend="jax")
    states = rollout_states(env, jax.random.key(0), num_envs=1, steps=0)
    share = {}
    for size in (128, 512):
        frame = np.asarray(render_frames(env, states, size=size))[0]
        share[size] = (frame != np.array(BACKGROUND, np.uint8)).any(-1).mean()
    ratio = share[512] / share[128]
    assert (0.8 < ratio < 1.25) if env.num_agents > 1 else ratio > 0.35, (share, ratio)


def test_tag_discs_grow_with_the_frame(tag_env):
    """One tagger's disc at 4x the frame size covers ~16x the pixels; at a
    small frame it keeps its 3-pixel radius."""
    states = _tag_state(tag_env, (5.0, 15.0), (14.0, 4.0), runner_in_game=True)
    red = {size: int((np.asarray(render_frames(tag_env, states, size=size))[0]
                      == np.array(RED, np.uint8)).all(-1).sum()) for size in (32, 128, 512)}
    assert 12 * red[128] < red[512] < 20 * red[128], red
    assert red[32] >= 20, red  # a disc of radius 3 pixels: about 28 pixels


def test_unknown_env_raises():
    class Fake:
        name = "my_env"
        params = None

    with pytest.raises(ValueError, match="my_env"):
        render_frames(Fake(), None)


def test_write_gif_keeps_every_frame(tmp_path):
    frames = np.full((4, 8, 8, 3), 255, np.uint8)  # identical frames
    path = write_gif(frames, tmp_path / "a.gif", fps=10)
    with Image.open(path) as im:
        assert im.n_frames == 4
    with pytest.raises(ValueError, match="u8"):
        write_gif(frames.astype(np.float32), tmp_path / "b.gif")


def test_cli_render_writes_gif(tmp_path, capsys):
    out = tmp_path / "cp.gif"
    assert cli_main(["render", "--env", "cartpole", "--steps", "6", "--backend", "jax",
                     "--size", "48", "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    with Image.open(out) as im:  # each frame under a header of 5 lines of 12 pixels:
        # the env, "random actions", the step, the episode, the score
        assert im.n_frames == 7 and im.size == (48, 5 * 12 + 2 + 48)


def test_legend_names_each_colour_by_what_the_env_declares(tag_env):
    # Tag: the groups of its policy_groups, in that order, in the colours drawn.
    states = _tag_state(tag_env, (5.0, 15.0), (14.0, 4.0), runner_in_game=True)
    assert legend(tag_env, states) == [("tagger", RED), ("runner", BLUE)]
    # simple_tag: the groups, then the shapes no agent moves, named where drawn
    # (label="landmark")
    mpe = jaxwarp.make("mpe_simple_tag", backend="jax")
    one = rollout_states(mpe, jax.random.key(0), 1, 0)
    assert legend(mpe, one) == [("adversary", RED), ("agent", GREEN), ("landmark", DARK)]
    # a single agent: no legend
    cart = jaxwarp.make("cartpole", backend="jax")
    assert legend(cart, rollout_states(cart, jax.random.key(0), 1, 0)) == []


def test_legend_takes_the_drawings_own_labels(tag_env):
    import dataclasses
    from types import SimpleNamespace

    def draw(p, s, canvas: Canvas):
        canvas.disc(s["x"], s["y"], 1.0, BLUE, label="player")
        canvas.disc(0.0, 0.0, 1.0, DARK)  # from the params alone: not in the legend
    env = SimpleNamespace(spec=dataclasses.replace(tag_env.spec, render_draw=draw),
                          params=tag_env.params, num_agents=2, policy_groups=None)
    states = _tag_state(tag_env, (5.0, 15.0), (14.0, 4.0), runner_in_game=True)
    assert legend(env, states) == [("player", BLUE)]


def test_cli_render_draws_the_legend(tmp_path, capsys):
    out = tmp_path / "tag.gif"
    assert cli_main(["render", "--env", "tag_continuous", "--steps", "1", "--backend", "jax",
                     "--size", "128", "--out", str(out)]) == 0
    with Image.open(out) as im:
        frame = np.asarray(im.convert("RGB"))
    # 12-pixel lines: the env, "random actions", step, episode, the two groups'
    # scores, then the legend's one line (both entries fit 128 pixels): a swatch
    # of each colour
    head = 7 * 12 + 2
    assert frame.shape == (head + 128, 128, 3)
    key = frame[6 * 12 + 1: head]
    colours = {tuple(v) for v in key.reshape(-1, 3)}
    assert RED in colours and BLUE in colours
    assert RED not in {tuple(v) for v in frame[: 6 * 12].reshape(-1, 3)}  # text lines


def test_legend_entries_flow_onto_more_lines():
    from jaxwarp.run.evaluate import label_panels

    frames = np.zeros((1, 8, 32, 3), np.uint8)
    key = [("tagger", RED), ("runner", BLUE)]
    out = label_panels(frames, [["a"]], key)  # 32 pixels: one entry a line
    assert out.shape == (1, 3 * 12 + 2 + 8, 32, 3)
    rows = [{tuple(v) for v in out[0, 1 + 12 * i: 1 + 12 * (i + 1)].reshape(-1, 3)}
            for i in (1, 2)]
    assert RED in rows[0] and BLUE not in rows[0] and BLUE in rows[1]
    assert label_panels(np.zeros((1, 8, 256, 3), np.uint8), [["a"]], key).shape[1] == (
        2 * 25 + 2 + 8)  # 256 pixels: both on one line (25-pixel lines)


def test_render_header_counts_the_episodes():
    import jax

    from jaxwarp.render import rollout_states
    from jaxwarp.run.evaluate import score_lines

    env = jaxwarp.make("cartpole", backend="jax")
    states = rollout_states(env, jax.random.key(0), 1, 200)  # random play: short episodes
    clock = np.asarray(states.timestep[:, 0])
    restarts = int(np.sum(np.diff(clock) < 0))
    assert restarts >= 2
    assert score_lines(states, {"agent": [0]}, 0)[:2] == ["step 0", "episode 1"]
    assert score_lines(states, {"agent": [0]}, 200)[1] == f"episode {restarts + 1}"


def test_cli_render_unknown_env(capsys):
    assert cli_main(["render", "--env", "nope", "--backend", "jax"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxwarp render: error:") and "nope" in err
    assert err.count("\n") == 1
    assert cli_main(["render"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize("name, params", [("mpe_simple_spread", {}),
                                          ("mpe_simple_spread", {"truncation": "mpe2"}),
                                          ("tag_gridworld", {"episode_length": 9})])
def test_rollout_of_one_episode_ends_on_its_last_state(name, params):
    """steps=None: the env's episode length (jaxwarp.core.episode_length), the
    last step without auto-reset, so the final frame is the episode's end (an
    MPE episode of JaxMARL's 26 steps: timestep 26, not a fresh 0)."""
    env = jaxwarp.make(name, backend="jax", **params)
    length = jaxwarp.core.episode_length(env)
    states = rollout_states(env, jax.random.key(2), num_envs=2)
    t = np.asarray(states.timestep)
    assert t.shape == (length + 1, 2)
    if name.startswith("mpe"):  # no early end: the whole episode, 0 .. length
        np.testing.assert_array_equal(t, np.arange(length + 1)[:, None].repeat(2, 1))
    # The same steps with auto-reset differ only in the last state.
    reset = rollout_states(env, jax.random.key(2), num_envs=2, steps=length)
    np.testing.assert_array_equal(np.asarray(reset.x)[:-1], np.asarray(states.x)[:-1])
    if name.startswith("mpe"):
        np.testing.assert_array_equal(np.asarray(reset.timestep)[-1], 0)


def test_rollout_steps_must_be_an_int():
    env = jaxwarp.make("cartpole", backend="jax")
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="steps must be None or an int >= 0"):
            rollout_states(env, jax.random.key(0), 1, steps=bad)
