"""Filming an agent: `record_episodes` plays episodes and renders them,
`write_video` writes the frames to a GIF (and an MP4 where imageio can).

Imported only where video is asked for: the training path never loads it.
"""

import dataclasses
import os
import secrets
import warnings
from pathlib import Path
from typing import Any, final

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import PRNGKeyArray, PyTree

import runners
from envs import AbstractEnv, AbstractWrapper
from envs.render import RENDERABLE, RenderError, render, renderable
from runners import TrainState
from zoo import AbstractAgent


@final
@dataclasses.dataclass(frozen=True)
class Episodes:
    """Recorded episodes: `frames[i]` and `returns[i]` belong to episode `i`.

    `lengths[i]` is the number of steps episode `i` took (`max_steps` if it had not
    ended by then). Its frames are the first state and the state after every step,
    `lengths[i] + 1` frames; through a wrapper, whose inner env has already started
    the next episode when one ends, the state it ended in is not kept, so
    `lengths[i]` frames (unless the episode had not ended).
    """

    frames: list[list[np.ndarray]]
    returns: np.ndarray
    lengths: np.ndarray

    def joined(self) -> list[np.ndarray]:
        """Every episode's frames, one after the other (for one video)."""
        return [frame for episode in self.frames for frame in episode]


def record_episodes(
    agent: AbstractAgent,
    agent_state: PyTree,
    env: AbstractEnv,
    *,
    key: PRNGKeyArray,
    num_episodes: int = 1,
    max_steps: int = 1000,
    greedy: bool = True,
) -> Episodes:
    """Play `num_episodes` episodes with the (greedy) policy and render them.

    The episodes are played as `runners.evaluate` plays them, with the same keys:
    `records.returns` equals `runners.evaluate(agent, agent_state, env, key=key,
    num_episodes=num_episodes, max_steps=max_steps, greedy=greedy)`.

    **Arguments:**

    - `agent_state`: the agent state to act with, or one seed's
      `runners.TrainState` (from `runners.train`, or `runners.seed_state`).
    - `env`: an env that `envs.render.renderable` accepts, possibly wrapped.
    - `num_episodes`: episodes played in parallel.
    - `max_steps`: steps played; an episode still running then is cut there.
    - `greedy`: act greedily (`agent.act(..., greedy=True)`).

    **Returns:** an `Episodes` with each episode's frames, return and length.

    **Raises:** `envs.render.RenderError` for an env without a renderer, before
    anything is compiled; `ValueError` for a `TrainState` with a seed axis.
    """
    if not renderable(env):
        raise RenderError(
            f"{env.name} has no renderer; envs that render: {', '.join(RENDERABLE)}"
        )
    if isinstance(agent_state, TrainState):
        if agent_state.iteration.ndim != 0:
            raise ValueError(
                "record_episodes films one seed; pick one with "
                "`runners.seed_state(state, i)`"
            )
        agent_state = agent_state.agent_state
    first, states, done, returns = jax.device_get(
        _rollout(agent, agent_state, env, key, num_episodes, max_steps, greedy)
    )
    ended = done.any(axis=0)
    lengths = np.where(ended, done.argmax(axis=0) + 1, max_steps)
    # A wrapper's state after the last step is the next episode's first.
    keep_last = ~ended | (not isinstance(env, AbstractWrapper))
    frames = []
    for i in range(num_episodes):
        shown = [_index(first, i)] + [
            _index(states, t, i) for t in range(lengths[i] - 1 + int(keep_last[i]))
        ]
        frames.append([render(env, state) for state in shown])
    return Episodes(frames, np.asarray(returns), lengths)


def _index(tree: PyTree, *index: int) -> PyTree:
    return jax.tree.map(lambda x: x[index], tree)


@eqx.filter_jit
def _rollout(
    agent: AbstractAgent,
    agent_state: PyTree,
    env: AbstractEnv,
    key: PRNGKeyArray,
    num_episodes: int,
    max_steps: int,
    greedy: bool,
) -> tuple[Any, Any, jax.Array, jax.Array]:
    """`(first states, states after each step [steps, episodes], ended at each
    step [steps, episodes], returns [episodes])`, with `runners.evaluate`'s keys."""
    k_reset, k_loop = jr.split(key)
    obs, env_state = jax.vmap(env.reset)(jr.split(k_reset, num_episodes))

    def body(carry, t):
        obs, env_state, returns, done, policy = carry
        obs, env_state, reward, terminated, truncated, policy = runners.play_step(
            agent,
            agent_state,
            env,
            k_loop,
            t,
            obs,
            env_state,
            greedy=greedy,
            carry=policy,
        )
        returns = returns + jnp.where(done, 0.0, reward)
        ends = terminated | truncated
        return (obs, env_state, returns, done | ends, policy), (env_state, ends)

    zeros = jnp.zeros(num_episodes)
    policy = runners.initial_carry(agent, num_episodes)  # a recurrent policy's
    carry = (obs, env_state, zeros, jnp.zeros(num_episodes, bool), policy)
    (_, _, returns, _, _), (states, ends) = jax.lax.scan(
        body, carry, jnp.arange(max_steps)
    )
    return env_state, states, ends, returns


def write_video(
    frames: list[np.ndarray], path_without_suffix: str | Path, fps: int = 30
) -> list[Path]:
    """Write frames as `<path>.gif`, and as `<path>.mp4` where imageio's ffmpeg
    plugin (the `imageio-ffmpeg` package) is installed.

    Each file appears whole or not at all (written under a temporary name, then
    renamed); the folder is created if need be. For several episodes, pass
    `Episodes.joined()`.

    **Arguments:**

    - `frames`: `[height, width, 3]` `uint8` images, all of one size.
    - `path_without_suffix`: e.g. `runs/3/video`; the suffixes are appended.
    - `fps`: frames per second (a GIF stores each frame's duration in whole
      hundredths of a second: 30 fps plays at 33).

    **Returns:** the paths written.

    **Raises:** `ValueError` for no frames, or frames of different shapes.
    """
    if not frames:
        raise ValueError("write_video: no frames")
    shapes = {np.shape(f) for f in frames}
    if len(shapes) != 1 or len(next(iter(shapes))) != 3:
        raise ValueError(
            f"write_video needs [height, width, 3] frames of one shape, got {shapes}"
        )
    base = Path(path_without_suffix)
    base.parent.mkdir(parents=True, exist_ok=True)
    gif = Path(f"{base}.gif")
    _atomic(gif, lambda tmp: _write_gif(frames, tmp, fps))
    written = [gif]
    try:
        import imageio_ffmpeg  # pyright: ignore[reportMissingImports]
    except ImportError:
        return written
    mp4 = Path(f"{base}.mp4")
    _atomic(mp4, lambda tmp: _write_mp4(frames, tmp, fps, imageio_ffmpeg))
    return [*written, mp4]


def _write_mp4(frames: list[np.ndarray], path: Path, fps: int, ffmpeg: Any) -> None:
    """H.264 through imageio's ffmpeg plugin, `imageio_ffmpeg`."""
    h, w = frames[0].shape[:2]
    pad = ((0, h % 2), (0, w % 2), (0, 0))  # yuv420p needs even sides
    writer = ffmpeg.write_frames(
        str(path), (w + w % 2, h + h % 2), fps=fps, macro_block_size=1
    )
    with warnings.catch_warnings():
        # The plugin starts ffmpeg with a `preexec_fn`, so Python forks and JAX
        # warns of deadlocks; the child only calls `setpgrp` and execs.
        warnings.filterwarnings("ignore", r"os\.fork\(\) was called", RuntimeWarning)
        writer.send(None)
    try:
        for frame in frames:
            writer.send(np.ascontiguousarray(np.pad(frame, pad, mode="edge")))
    finally:
        writer.close()


def _write_gif(frames: list[np.ndarray], path: Path, fps: int) -> None:
    from PIL import Image

    images = [Image.fromarray(np.asarray(f, dtype=np.uint8)) for f in frames]
    # One adaptive palette for the whole clip, from a strip of sampled frames:
    # small files, and no colour flicker between frames.
    sample = images[:: max(1, len(images) // 16)]
    strip = Image.new("RGB", (sample[0].width, sample[0].height * len(sample)))
    for i, image in enumerate(sample):
        strip.paste(image, (0, i * image.height))
    palette = strip.quantize(colors=64, method=Image.Quantize.MEDIANCUT)
    indexed = [im.quantize(palette=palette, dither=Image.Dither.NONE) for im in images]
    indexed[0].save(
        path,
        format="GIF",
        save_all=True,
        append_images=indexed[1:],
        duration=round(1000 / fps),
        loop=0,
        optimize=True,
    )


def _atomic(path: Path, write) -> None:
    """Run `write(tmp)` on a temporary file beside `path`, then rename it to
    `path`; remove the temporary file if writing fails."""
    # Named here rather than by `tempfile`, whose files are private (0600).
    tmp = path.with_name(f".{path.stem}.{secrets.token_hex(4)}.tmp{path.suffix}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
