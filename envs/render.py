"""Host-side rendering of env states to RGB frames: `from envs.render import render`.

Classic control is drawn as Gymnasium draws it (with Pillow, about a millisecond a
frame); a MinAtar game is drawn as its observation grid, one colour per channel.
Nothing here is imported by `envs`, the agents or the runners.
"""

import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jaxtyping import UInt8
from PIL import Image, ImageDraw

from . import _registry
from ._env import AbstractEnv, AbstractWrapper
from ._gymnax import GymnaxEnv

_CLASSIC = (
    "Acrobot-v1",
    "CartPole-v1",
    "MountainCar-v0",
    "MountainCarContinuous-v0",
    "Pendulum-v1",
)
_MINATAR = (
    "Asterix-MinAtar",
    "Breakout-MinAtar",
    "Freeway-MinAtar",
    "Seaquest-MinAtar",
    "SpaceInvaders-MinAtar",
)
RENDERABLE: tuple[str, ...] = tuple(sorted(_CLASSIC + _MINATAR))

Frame = UInt8[np.ndarray, "height width 3"]

_WHITE = (255, 255, 255)
_BLACK = (0, 0, 0)
# MinAtar: background, then one colour per channel (Seaquest has the most, 10).
_PALETTE = np.array(
    [
        (20, 20, 20),
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (214, 39, 40),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (188, 189, 34),
        (23, 190, 207),
        (255, 255, 255),
    ],
    dtype=np.uint8,
)
_GRID = np.array((70, 70, 70), dtype=np.uint8)
CELL = 16


class RenderError(ValueError):
    """An env that `render` cannot draw."""


def renderable(env: AbstractEnv | str) -> bool:
    """Whether `render` draws states of `env` (an env, possibly wrapped, or a
    name such as `"CartPole-v1"`)."""
    name = env if isinstance(env, str) else _unwrap_env(env).name
    return name in RENDERABLE or _suite_render(name) is not None


def _suite_render(name: str) -> Callable[[Any, Any], Frame] | None:
    """The renderer env `name`'s suite registered (`Suite.render`), if any."""
    suite = _registry.suite_of(name)
    return None if suite is None else _registry.SUITES[suite].render


def render(env: AbstractEnv, state: Any) -> Frame:
    """Draw one state of `env` as an RGB image.

    **Arguments:**

    - `env`: one of the envs in `RENDERABLE` or of a suite with a renderer
      (`Suite.render`: XLand-MiniGrid's tasks), possibly wrapped (wrappers
      are looked through, down to the base env and its state).
    - `state`: one env's state, as `env.reset` or `env.step` returns it (jax or
      NumPy leaves), without a batch axis.

    **Returns:** a `[height, width, 3]` `uint8` array: 600x400 for CartPole and
    MountainCar, 500x500 for Pendulum and Acrobot, 16 pixels per cell (160x160)
    for MinAtar; XLand-MiniGrid's own drawing (32 pixels per cell, the agent's
    view shaded) for its tasks.

    **Raises:** `RenderError` for an env without a renderer; `ValueError` for a
    batched state or a state of another env.
    """
    base = _unwrap_env(env)
    if base.name not in RENDERABLE and (draw := _suite_render(base.name)):
        return draw(base, _unwrap_state(env, state))
    if base.name not in RENDERABLE:
        raise RenderError(
            f"{base.name} has no renderer; envs that render: {', '.join(RENDERABLE)}"
        )
    state = _unwrap_state(env, state)
    check_one_state(base, state, getattr(state, "time", None), "time")
    if base.name in _MINATAR:
        assert isinstance(base, GymnaxEnv)  # only gymnax has MinAtar
        return _minatar(base, state)
    params = base.params if isinstance(base, GymnaxEnv) else base
    try:
        return _DRAW[base.name](params, state)
    except AttributeError as e:
        raise ValueError(
            f"{type(state).__name__} is not a state of {base.name} ({e})"
        ) from None


def _unwrap_env(env: AbstractEnv) -> AbstractEnv:
    while isinstance(env, AbstractWrapper):
        env = env.env
    return env


def _unwrap_state(env: AbstractEnv, state: Any) -> Any:
    # A wrapper with state of its own keeps its inner env's as `env_state` (as
    # `EpisodeStatistics` does); one without passes its inner env's state on.
    while isinstance(env, AbstractWrapper):
        state = getattr(state, "env_state", state)
        env = env.env
    return state


def _canvas(width: int, height: int) -> tuple[Image.Image, ImageDraw.ImageDraw]:
    image = Image.new("RGB", (width, height), _WHITE)
    return image, ImageDraw.Draw(image)


def _to_screen(points: np.ndarray, height: int) -> list[tuple[float, float]]:
    """World points (y up, as Gymnasium draws) to Pillow's pixels (y down)."""
    return [(float(x), height - float(y)) for x, y in points]


def _place(points: np.ndarray, angle: float, x: float, y: float) -> np.ndarray:
    """Rotate points counter-clockwise by `angle`, then move the origin to `(x, y)`."""
    c, s = math.cos(angle), math.sin(angle)
    return points @ np.array([[c, s], [-s, c]]) + np.array([x, y])


def _box(left: float, right: float, top: float, bottom: float) -> np.ndarray:
    return np.array([(left, bottom), (left, top), (right, top), (right, bottom)])


def _circle(draw, x: float, y: float, r: float, height: int, fill) -> None:
    y = height - y
    draw.ellipse([x - r, y - r, x + r, y + r], fill=fill)


def _cartpole(p: Any, s: Any) -> Frame:
    width, height = 600, 400
    scale = width / (2 * float(p.x_threshold))
    pole_width, pole_len = 10.0, scale * 2 * float(p.length)
    cart_y, axle = 100.0, 30.0 / 4
    cart_x = float(s.x) * scale + width / 2
    image, draw = _canvas(width, height)
    draw.line([(0, height - cart_y), (width, height - cart_y)], fill=_BLACK)
    cart = _place(_box(-25.0, 25.0, 15.0, -15.0), 0.0, cart_x, cart_y)
    draw.polygon(_to_screen(cart, height), fill=_BLACK)
    pole = _box(-pole_width / 2, pole_width / 2, pole_len - pole_width / 2, -5.0)
    pole = _place(pole, -float(s.theta), cart_x, cart_y + axle)
    draw.polygon(_to_screen(pole, height), fill=(202, 152, 101))
    _circle(draw, cart_x, cart_y + axle, pole_width / 2, height, (129, 132, 203))
    return np.asarray(image)


def _pendulum(p: Any, s: Any) -> Frame:
    size = 500
    scale = size / (2 * 2.2)
    centre = size / 2
    rod_len, rod_width = float(p.l) * scale, 0.2 * scale
    angle = float(s.theta) + math.pi / 2
    image, draw = _canvas(size, size)
    rod = _box(0.0, rod_len, rod_width / 2, -rod_width / 2)
    rod = _place(rod, angle, centre, centre)
    draw.polygon(_to_screen(rod, size), fill=(204, 77, 77))
    for x, y in (
        (centre, centre),
        (centre + rod_len * math.cos(angle), centre + rod_len * math.sin(angle)),
    ):
        _circle(draw, x, y, rod_width / 2, size, (204, 77, 77))
    _circle(draw, centre, centre, 0.05 * scale, size, _BLACK)
    # The applied torque, as Gymnasium's arrow: an arc sized by |u|, pointing the
    # way it turns (positive: counter-clockwise).
    u = float(s.last_u) / float(getattr(p, "max_torque", 2.0))
    if abs(u) > 1e-3:
        r = 0.6 * scale * min(abs(u), 1.0)
        draw.arc(
            [centre - r, centre - r, centre + r, centre + r],
            start=200,
            end=340,
            fill=_BLACK,
            width=max(2, int(r / 12)),
        )
        # Pillow's angles run clockwise from +x on screen; the arrowhead sits at
        # the end the torque turns towards.
        tip = math.radians(200 if u > 0 else 340)
        tx, ty = centre + r * math.cos(tip), centre + r * math.sin(tip)
        head = r / 4
        back = 1.0 if u > 0 else -1.0  # tangent pointing back along the arc
        dx, dy = -math.sin(tip) * back, math.cos(tip) * back
        nx, ny = math.cos(tip), math.sin(tip)
        draw.polygon(
            [
                (tx - dx * head, ty - dy * head),
                (tx + dx * head + nx * head / 2, ty + dy * head + ny * head / 2),
                (tx + dx * head - nx * head / 2, ty + dy * head - ny * head / 2),
            ],
            fill=_BLACK,
        )
    return np.asarray(image)


def _acrobot(p: Any, s: Any) -> Frame:
    size = 500
    l1, l2 = float(p.link_length_1), float(p.link_length_2)
    scale = size / (2 * (l1 + l2 + 0.2))
    centre = size / 2
    a1, a2 = float(s.joint_angle1), float(s.joint_angle2)
    image, draw = _canvas(size, size)
    target = centre + scale  # the tip must rise a link length above the pivot
    draw.line(
        [(centre - 2.2 * scale, size - target), (centre + 2.2 * scale, size - target)],
        fill=_BLACK,
    )
    x1, y1 = l1 * math.sin(a1), -l1 * math.cos(a1)
    joints = [(0.0, 0.0, a1 - math.pi / 2, l1), (x1, y1, a1 + a2 - math.pi / 2, l2)]
    for x, y, angle, length in joints:
        link = _box(0.0, length * scale, 0.1 * scale, -0.1 * scale)
        link = _place(link, angle, x * scale + centre, y * scale + centre)
        draw.polygon(_to_screen(link, size), fill=(0, 204, 204))
        _circle(
            draw,
            x * scale + centre,
            y * scale + centre,
            0.1 * scale,
            size,
            (204, 204, 0),
        )
    return np.asarray(image)


def _mountain_car(p: Any, s: Any) -> Frame:
    width, height = 600, 400
    low, high = float(p.min_position), float(p.max_position)
    scale = width / (high - low)
    lift = lambda x: np.sin(3 * x) * 0.45 + 0.55
    image, draw = _canvas(width, height)
    xs = np.linspace(low, high, 100)
    curve = np.stack([(xs - low) * scale, lift(xs) * scale], axis=1)
    draw.line(_to_screen(curve, height), fill=_BLACK, width=2)
    pos = float(s.position)
    angle = math.cos(3 * pos)  # the slope, as Gymnasium tilts the car
    origin = ((pos - low) * scale, 10 + float(lift(pos)) * scale)
    car = _place(_box(-20.0, 20.0, 20.0, 0.0), angle, *origin)
    draw.polygon(_to_screen(car, height), fill=_BLACK)
    for wheel in _place(np.array([(10.0, 0.0), (-10.0, 0.0)]), angle, *origin):
        _circle(draw, wheel[0], wheel[1], 20 / 2.5, height, (128, 128, 128))
    flag_x = (float(p.goal_position) - low) * scale
    flag_y = float(lift(float(p.goal_position))) * scale
    draw.line([(flag_x, height - flag_y), (flag_x, height - flag_y - 50)], fill=_BLACK)
    flag = np.array(
        [(flag_x, flag_y + 50), (flag_x, flag_y + 40), (flag_x + 25, flag_y + 45)]
    )
    draw.polygon(_to_screen(flag, height), fill=(204, 204, 0))
    return np.asarray(image)


_DRAW: dict[str, Callable[[Any, Any], Frame]] = {
    "Acrobot-v1": _acrobot,
    "CartPole-v1": _cartpole,
    "MountainCar-v0": _mountain_car,
    "MountainCarContinuous-v0": _mountain_car,
    "Pendulum-v1": _pendulum,
}


# `get_obs` compiled once per gymnax class: `envs.make` builds a new gymnax env each
# time, and MinAtar's `get_obs` reads only the state and params, never what the
# constructor sets (the action set), so the first instance serves them all.
_GET_OBS: dict[type, Callable[[Any, Any], jax.Array]] = {}


def _minatar(env: GymnaxEnv, state: Any) -> Frame:
    get_obs = _GET_OBS.get(type(env.env))
    if get_obs is None:
        get_obs = _GET_OBS[type(env.env)] = jax.jit(env.env.get_obs)
    grid = np.asarray(get_obs(state, env.params)) > 0.5  # [10, 10, C]
    channels = grid.shape[-1]
    # Where objects overlap the highest channel shows, as in MinAtar's own display.
    top = channels - np.argmax(grid[..., ::-1], axis=-1)
    colour = np.where(grid.any(axis=-1), top, 0)
    image = _PALETTE[np.repeat(np.repeat(colour, CELL, axis=0), CELL, axis=1)]
    image[::CELL] = _GRID
    image[:, ::CELL] = _GRID
    return image


def check_one_state(env: AbstractEnv, state: Any, clock: Any, field: str) -> None:
    """Refuse what is not one state of `env`: no step counter `clock` (its
    `field`), or a batch of them."""
    if clock is None:
        raise ValueError(f"{type(state).__name__} is not a state of {env.name}")
    if np.ndim(clock) != 0:
        raise ValueError(
            f"render draws one env's state, got a batch ({field} has shape "
            f"{list(np.shape(clock))}); pass one env's state, e.g. "
            "`jax.tree.map(lambda x: x[i], state)`"
        )
