"""Networks as Equinox modules: a dense or convolutional torso, Q heads, actor
and critic.

Every network takes one observation (callers vmap) and checks its shape against
the observation space it was built for, at trace time, so that a wrong-shaped
observation fails with a readable message instead of a matmul shape error.
"""

import abc
import math
from collections.abc import Callable, Sequence
from typing import TypeVar, final

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray, PyTree, Shaped

ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "relu": jax.nn.relu,
    "tanh": jnp.tanh,
    "gelu": jax.nn.gelu,
    "silu": jax.nn.silu,
    "elu": jax.nn.elu,
}


def _linear(
    in_size: int, out_size: int, scale: float, *, key: PRNGKeyArray
) -> eqx.nn.Linear:
    """A linear layer with orthogonal weights (gain `scale`) and zero bias."""
    layer = eqx.nn.Linear(in_size, out_size, key=key)
    weight = jax.nn.initializers.orthogonal(scale)(key, (out_size, in_size))
    return eqx.tree_at(
        lambda m: (m.weight, m.bias), layer, (weight, jnp.zeros((out_size,)))
    )


T = TypeVar("T")


def uniform_fan_in(module: T, *, key: PRNGKeyArray) -> T:
    """Re-draw every `eqx.nn.Linear` of `module` from one uniform sample, with
    Equinox's default scale (weights and biases in `±1/sqrt(fan_in)`).

    The same distribution as building the layers with their own keys, but one
    random-number kernel instead of one per weight and bias: each costs about
    0.15 s of compilation on a small CPU, and the draws it replaces are removed
    as dead code.
    """
    is_linear = lambda x: isinstance(x, eqx.nn.Linear)
    linears = lambda m: [
        x for x in jax.tree.leaves(m, is_leaf=is_linear) if is_linear(x)
    ]
    layers = linears(module)
    total = sum(layer.weight.size + layer.bias.size for layer in layers)
    draw = jr.uniform(key, (total,), minval=-1.0, maxval=1.0)
    values, start = [], 0
    for layer in layers:
        limit = 1.0 / np.sqrt(layer.in_features)
        for x in (layer.weight, layer.bias):
            values.append(limit * draw[start : start + x.size].reshape(x.shape))
            start += x.size
    where = lambda m: [x for layer in linears(m) for x in (layer.weight, layer.bias)]
    return eqx.tree_at(where, module, values)


# Recurrent torsos: the feed-forward torso "auto" picks, then Equinox's cell.
RECURRENT = ("gru", "lstm")
TORSOS = ("auto", "mlp", "cnn", "simba", *RECURRENT)


def torso_kind(torso: str, obs_shape: tuple[int, ...], *, who: str = "agent") -> str:
    """`"mlp"`, `"cnn"`, `"simba"`, `"gru"` or `"lstm"`: the torso `torso`
    names for observations of `obs_shape`. `"auto"` picks the CNN for image
    observations (three axes, `[height, width, channels]` as gymnax's MinAtar
    gives them) and the MLP otherwise; a `ValueError` names what is wrong with
    any other choice. The recurrent ones put the torso `"auto"` picks before
    their cell; SimBa flattens any observation."""
    if torso not in TORSOS:
        raise ValueError(f"{who}: unknown torso {torso!r}; valid ones: {TORSOS}")
    if torso in RECURRENT or torso == "simba":
        return torso
    if torso == "auto":
        return "cnn" if len(obs_shape) == 3 else "mlp"
    if torso == "cnn" and len(obs_shape) != 3:
        raise ValueError(
            f"{who}: torso='cnn' needs image observations of shape [height, width, "
            f"channels], but this env's observations have shape {obs_shape}; use "
            "torso='mlp' (or 'auto')"
        )
    return torso


def _conv(
    in_channels: int, out_channels: int, scale: float, *, key: PRNGKeyArray
) -> eqx.nn.Conv2d:
    """A 3x3 convolution without padding, orthogonal weights (gain `scale`, over
    the flattened `[in_channels, 3, 3]` inputs of each filter), zero bias."""
    conv = eqx.nn.Conv2d(in_channels, out_channels, kernel_size=3, key=key)
    shape = conv.weight.shape
    flat = jax.nn.initializers.orthogonal(scale)(
        key, (out_channels, int(np.prod(shape[1:])))
    )
    bias = jnp.zeros_like(conv.bias)  # pyright: ignore[reportArgumentType]
    return eqx.tree_at(lambda m: (m.weight, m.bias), conv, (flat.reshape(shape), bias))


def conv3x3(conv: eqx.nn.Conv2d, x: Float[Array, "h w c"]) -> Float[Array, "h2 w2 o"]:
    """`conv`'s 3x3 convolution without padding of one channels-last image;
    channels-last out.

    Computed as one matrix product per output row: each row of the output is
    the three input rows above it (flattened, `3 * w * c` values) times a
    banded matrix built from the filters (`[3 * w * c, (w - 2) * o]`). Not
    `conv(x)`: the runner vmaps over seeds, each with its own filters, and XLA
    on CPU runs a convolution batched over its filters (a grouped convolution)
    several times slower; gathering 3x3 patches (im2col) was also slower on the
    2-core test machine (about 4x, forward).
    """
    height, width, channels = x.shape
    out = conv.weight.shape[0]
    # band[j, col, c] = 1 where input column `col` is the filter's column j for
    # output column c.
    band = np.zeros((3, width, width - 2), np.float32)
    for j in range(3):
        band[j, np.arange(width - 2) + j, np.arange(width - 2)] = 1.0
    # conv.weight is [out, in, 3 (rows), 3 (columns)].
    rows_weight = jnp.einsum("okij,jwc->iwkco", conv.weight, band).reshape(
        3 * width * channels, (width - 2) * out
    )
    rows = x.reshape(height, width * channels)
    windows = jnp.concatenate(
        [rows[i : height - 2 + i] for i in range(3)], axis=-1
    )  # [h-2, 3 * w * c]
    y = (windows @ rows_weight).reshape(height - 2, width - 2, out)
    if conv.bias is not None:
        y = y + conv.bias.reshape(1, 1, out)
    return y


@final
class Torso(eqx.Module):
    """The features of one observation: an optional convolution, then hidden
    dense layers with an activation.

    `kind="mlp"` flattens the observation into the dense layers. `kind="cnn"`
    (the MinAtar paper's torso) first applies one 3x3 convolution with
    `conv_channels` filters and no padding to a `[height, width, channels]`
    observation, with the activation, and flattens its output into the dense
    layers (MinAtar's is one dense layer of 128). `"auto"` picks by the
    observation's shape (`torso_kind`). With `extra_inputs`, a second input of
    that size (a continuous action, for `QCritic`) joins the flattened features
    before the dense layers.

    Layers are initialised orthogonally (gain sqrt 2, as PPO and DQN
    implementations do), or with Equinox's default uniform fan-in initialisation
    when `orthogonal=False` (as SAC, TD3 and DDPG implementations do; it also
    compiles faster, having no QR decomposition). With `layer_norm`, each hidden
    layer (the convolution's output too) is normalised before its activation
    (as PQN does, in place of a target network).

    `kind="simba"` is SimBa's network (Lee et al., ICLR 2025): the flattened
    observation goes through a linear embedding to the width `h` of
    `hidden_sizes` (all equal), then one residual block per entry,
    `x + W2 act(W1 LN(x))` with an inner width of `4h`, and a final layer
    norm. (SimBa's third part, running observation normalisation, is the
    agent's: `torso="simba"` turns it on, see `AbstractAgent`.) `layer_norm`
    does not apply.
    """

    conv: eqx.nn.Conv2d | None
    conv_norm: eqx.nn.LayerNorm | None
    layers: tuple[eqx.nn.Linear, ...]
    norms: tuple[eqx.nn.LayerNorm, ...] | None
    activation: str = eqx.field(static=True)
    obs_shape: tuple[int, ...] = eqx.field(static=True)
    extra_inputs: int = eqx.field(static=True)
    # SimBa's residual blocks, (layer norm, up, down) each, and its last norm.
    blocks: tuple[tuple[eqx.nn.LayerNorm, eqx.nn.Linear, eqx.nn.Linear], ...] | None
    final_norm: eqx.nn.LayerNorm | None

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        hidden_sizes: Sequence[int],
        activation: str,
        *,
        kind: str = "auto",
        conv_channels: int = 16,
        extra_inputs: int = 0,
        orthogonal: bool = True,
        layer_norm: bool = False,
        key: PRNGKeyArray,
    ):
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"unknown activation {activation!r}; valid ones: {sorted(ACTIVATIONS)}"
            )
        obs_shape = tuple(obs_shape)
        if kind in RECURRENT:
            raise ValueError(
                f"Torso: kind={kind!r} is recurrent; build a RecurrentTorso (or "
                "pass the network torso=...) instead"
            )
        kind = torso_kind(kind, obs_shape, who="Torso")
        self.blocks, self.final_norm = None, None
        if kind == "simba":
            widths = set(hidden_sizes)
            if len(widths) != 1:
                raise ValueError(
                    "Torso: torso='simba' takes hidden_sizes of one width, one "
                    f"entry per residual block, e.g. (128, 128); got {hidden_sizes!r}"
                )
            (width,) = widths
            features = int(np.prod(obs_shape)) + extra_inputs
            linear = lambda i, o, k: (
                _linear(i, o, np.sqrt(2), key=k)
                if orthogonal
                else eqx.nn.Linear(i, o, key=k)
            )
            k_embed, *k_blocks = jr.split(key, len(hidden_sizes) + 1)
            self.conv, self.conv_norm, self.norms = None, None, None
            self.layers = (linear(features, width, k_embed),)
            self.blocks = tuple(
                (
                    eqx.nn.LayerNorm(width),
                    linear(width, 4 * width, k_up),
                    linear(4 * width, width, k_down),
                )
                for k_up, k_down in (jr.split(k) for k in k_blocks)
            )
            self.final_norm = eqx.nn.LayerNorm(width)
            self.activation = activation
            self.obs_shape = obs_shape
            self.extra_inputs = extra_inputs
            return
        if kind == "cnn":
            # Split only here: MLP torsos draw from `key` exactly as before.
            k_conv, key = jr.split(key)
            height, width, channels = obs_shape
            if height < 3 or width < 3:
                raise ValueError(
                    f"Torso: a 3x3 convolution needs images of at least 3x3, got "
                    f"{obs_shape}; use kind='mlp'"
                )
            self.conv = (
                _conv(channels, conv_channels, np.sqrt(2), key=k_conv)
                if orthogonal
                else eqx.nn.Conv2d(channels, conv_channels, 3, key=k_conv)
            )
            conv_shape = (height - 2, width - 2, conv_channels)
            self.conv_norm = eqx.nn.LayerNorm(conv_shape) if layer_norm else None
            features = int(np.prod(conv_shape))
        else:
            self.conv, self.conv_norm = None, None
            features = int(np.prod(obs_shape))
        sizes = [features + extra_inputs, *hidden_sizes]
        keys = jr.split(key, max(len(sizes) - 1, 1))
        self.layers = tuple(
            _linear(i, o, np.sqrt(2), key=k)
            if orthogonal
            else eqx.nn.Linear(i, o, key=k)
            for i, o, k in zip(sizes[:-1], sizes[1:], keys, strict=False)
        )
        self.norms = (
            tuple(eqx.nn.LayerNorm(o) for o in hidden_sizes) if layer_norm else None
        )
        self.activation = activation
        self.obs_shape = obs_shape
        self.extra_inputs = extra_inputs

    @property
    def kind(self) -> str:
        if self.blocks is not None:
            return "simba"
        return "mlp" if self.conv is None else "cnn"

    @property
    def out_size(self) -> int:
        if self.layers:
            return int(self.layers[-1].weight.shape[0])
        if self.conv is None:
            return int(np.prod(self.obs_shape)) + self.extra_inputs
        height, width, _ = self.obs_shape
        channels = int(self.conv.weight.shape[0])
        return channels * (height - 2) * (width - 2) + self.extra_inputs

    def __call__(
        self,
        obs: Shaped[Array, "..."],
        extra: Float[Array, " extra"] | None = None,
    ) -> Float[Array, " features"]:
        if obs.shape != self.obs_shape:
            raise ValueError(
                f"observation has shape {obs.shape}, but this network was built for "
                f"the env's observation shape {self.obs_shape}. Networks take one "
                "observation: vmap over a batch (e.g. `jax.vmap(agent.act, ...)`)."
            )
        fn = ACTIVATIONS[self.activation]
        x = obs.astype(jnp.float32)
        if self.conv is not None:
            x = conv3x3(self.conv, x)
            if self.conv_norm is not None:
                x = self.conv_norm(x)
            x = fn(x)
        x = jnp.ravel(x)
        if extra is not None:
            x = jnp.concatenate([x, extra])
        if self.blocks is not None:
            assert self.final_norm is not None
            x = self.layers[0](x)
            for norm, up, down in self.blocks:
                x = x + down(fn(up(norm(x))))
            return self.final_norm(x)
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if self.norms is not None:
                x = self.norms[i](x)
            x = fn(x)
        return x

    def step(self, carry: PyTree, obs: Shaped[Array, "..."]) -> tuple[Array, PyTree]:
        """`(features, carry)`: a feed-forward torso passes the carry through."""
        return self(obs), carry


@final
class RecurrentTorso(eqx.Module):
    """A feed-forward `Torso` (the one `"auto"` picks: dense layers, after a
    convolution for images) followed by one of Equinox's recurrent cells
    (`eqx.nn.GRUCell` or `eqx.nn.LSTMCell`, `cell_size` units). As with the
    cells, the carry goes in and the next one comes back out: `step(carry,
    obs) -> (features, carry)`, the features being the cell's output."""

    body: Torso
    cell: eqx.nn.GRUCell | eqx.nn.LSTMCell
    kind: str = eqx.field(static=True)

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        hidden_sizes: Sequence[int],
        activation: str,
        *,
        kind: str,
        cell_size: int,
        key: PRNGKeyArray,
        **torso_kwargs,
    ):
        if kind not in RECURRENT:
            raise ValueError(
                f"RecurrentTorso: unknown cell {kind!r}; valid ones: {RECURRENT}"
            )
        if type(cell_size) is not int or cell_size <= 0:
            raise ValueError(
                f"RecurrentTorso: cell_size must be a positive integer, got "
                f"{cell_size!r}"
            )
        k_body, k_cell = jr.split(key)
        self.body = Torso(
            obs_shape, hidden_sizes, activation, key=k_body, **torso_kwargs
        )
        cell = eqx.nn.GRUCell if kind == "gru" else eqx.nn.LSTMCell
        self.cell = cell(self.body.out_size, cell_size, key=k_cell)
        self.kind = kind

    @property
    def out_size(self) -> int:
        return int(self.cell.hidden_size)

    def initial_carry(self) -> PyTree:
        """The carry at an episode's start: zeros (`(h, c)` for the LSTM)."""
        return initial_cell_carry(self.kind, self.out_size)

    def step(self, carry: PyTree, obs: Shaped[Array, "..."]) -> tuple[Array, PyTree]:
        x = self.body(obs)
        if isinstance(self.cell, eqx.nn.LSTMCell):
            carry = self.cell(x, carry)
            return carry[0], carry
        carry = self.cell(x, carry)
        return carry, carry

    def __call__(self, obs: Shaped[Array, "..."]) -> Array:
        raise TypeError(
            f"a {self.kind} torso is recurrent: call step(carry, obs) with a carry "
            "from initial_carry()"
        )


def initial_cell_carry(kind: str, cell_size: int) -> PyTree:
    """Zeros shaped as one `kind` cell's carry (`()` for a feed-forward torso)."""
    if kind == "gru":
        return jnp.zeros((cell_size,))
    if kind == "lstm":
        return (jnp.zeros((cell_size,)), jnp.zeros((cell_size,)))
    return ()


def make_torso(
    obs_shape: tuple[int, ...],
    hidden_sizes: Sequence[int],
    activation: str,
    *,
    kind: str,
    cell_size: int | None = None,
    key: PRNGKeyArray,
    **torso_kwargs,
) -> "Torso | RecurrentTorso":
    """The torso `kind` names: a `Torso`, or with `"gru"`/`"lstm"` a
    `RecurrentTorso` of `cell_size` units."""
    if kind in RECURRENT:
        if cell_size is None:
            raise ValueError(f"torso={kind!r} needs a cell_size")
        return RecurrentTorso(
            obs_shape,
            hidden_sizes,
            activation,
            kind=kind,
            cell_size=cell_size,
            key=key,
            **torso_kwargs,
        )
    return Torso(
        obs_shape, hidden_sizes, activation, kind=kind, key=key, **torso_kwargs
    )


# Taylor coefficients of cos(t) in t**2, for |t| <= pi / 2: the truncation
# error is below (pi / 2)**14 / 14! < 1e-8, under float32's rounding.
_COS_TAYLOR = tuple((-1.0) ** k / math.factorial(2 * k) for k in range(7))


def cosine_embedding(
    fractions: Float[Array, " n"], size: int
) -> Float[Array, "n size"]:
    """IQN's embedding of quantile fractions `tau`: `cos(pi * i * tau)` for
    `i = 1..size` (Dabney et al., 2018, eq. 4; the `i = 0` term of the paper's
    sum is a constant, which the layer's bias already gives).

    Computed as `cos(pi * y)` for `y = i * tau`, not by `jnp.cos`: `cos(pi y)`
    has period 2 in `y`, so the argument reduces exactly (`y - 2 round(y/2)`,
    no rounding of pi times a large number), and folds to `[0, pi/2]`, where a
    degree-12 Taylor polynomial is exact to float32. On a CPU that is about 7x
    faster than XLA's `cos` (which reduces any argument); with `jnp.cos` the
    cosines were about 30 % of IQN's training time there (docs/tuning.md,
    iqn). It is also closer to the true value: 3e-6 from float64 at 32
    cosines, against 1e-5 for `jnp.cos`."""
    i = jnp.arange(1, size + 1, dtype=jnp.float32)
    y = fractions[:, None] * i[None, :]
    a = jnp.abs(y - 2.0 * jnp.round(0.5 * y))  # cos(pi y) = cos(pi a), a in [0, 1]
    flip = a > 0.5  # cos(pi a) = -cos(pi (1 - a))
    t = jnp.pi * jnp.where(flip, 1.0 - a, a)
    t2 = t * t
    c = jnp.full_like(t2, _COS_TAYLOR[-1])
    for coefficient in reversed(_COS_TAYLOR[:-1]):
        c = c * t2 + coefficient
    return jnp.where(flip, -c, c)


@final
class NoisyLinear(eqx.Module):
    """A linear layer with learnt, factorised Gaussian noise on its weights
    (NoisyNet, Fortunato et al., 2018, section 3):
    `y = (mu_w + sigma_w * eps_w) x + mu_b + sigma_b * eps_b`, where
    `eps_w = f(eps_out) f(eps_in)^T`, `eps_b = f(eps_out)`, the `eps` are
    standard normal draws from the key and `f(e) = sign(e) sqrt(|e|)`.

    Called with a key, the layer draws its noise from it (the same key, the
    same noise); with `key=None` it is the layer at its mean weights,
    deterministic (a greedy policy's). Initialisation as in the paper's
    factorised case: means uniform in `±1/sqrt(in)`, scales `sigma0/sqrt(in)`.
    The noise term is computed as `f(eps_out) * (sigma_w @ (f(eps_in) * x))`,
    which equals the sum above without building the `[out, in]` noise matrix.
    """

    weight: Float[Array, "out in"]
    bias: Float[Array, " out"]
    weight_sigma: Float[Array, "out in"]
    bias_sigma: Float[Array, " out"]
    in_features: int = eqx.field(static=True)
    out_features: int = eqx.field(static=True)

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        sigma0: float = 0.5,
        key: PRNGKeyArray,
    ):
        if not sigma0 > 0:
            raise ValueError(f"NoisyLinear: sigma0 must be > 0, got {sigma0!r}")
        k_w, k_b = jr.split(key)
        bound = 1.0 / np.sqrt(in_features)
        self.weight = jr.uniform(
            k_w, (out_features, in_features), minval=-bound, maxval=bound
        )
        self.bias = jr.uniform(k_b, (out_features,), minval=-bound, maxval=bound)
        self.weight_sigma = jnp.full((out_features, in_features), sigma0 * bound)
        self.bias_sigma = jnp.full((out_features,), sigma0 * bound)
        self.in_features = in_features
        self.out_features = out_features

    def __call__(
        self, x: Float[Array, " in"], *, key: PRNGKeyArray | None = None
    ) -> Float[Array, " out"]:
        mean = self.weight @ x + self.bias
        if key is None:
            return mean
        k_in, k_out = jr.split(key)
        scaled = lambda e: jnp.sign(e) * jnp.sqrt(jnp.abs(e))
        eps_in = scaled(jr.normal(k_in, (self.in_features,)))
        eps_out = scaled(jr.normal(k_out, (self.out_features,)))
        noise = eps_out * (self.weight_sigma @ (eps_in * x) + self.bias_sigma)
        return mean + noise


@final
class QNetwork(eqx.Module):
    """Action values `Q(obs, ·)`; with `dueling`, `V(obs) + A(obs, ·) - mean A`.

    With `num_atoms`, each action gets `num_atoms` outputs (`[actions, atoms]`):
    the logits of a categorical return distribution (C51) or its quantiles
    (QR-DQN); the dueling combination then applies atom by atom.

    With `quantile_embedding` (IQN), the network gives the return's quantiles at
    fractions it is given (`quantiles(obs, fractions)`): the torso's features
    are multiplied element-wise by a dense embedding of the fractions
    (`cosine_embedding`, `quantile_embedding` cosines, ReLU), go through one
    more hidden layer of the same width, and the head gives each action's
    quantile, fraction by fraction (dueling too).

    With `noisy` (NoisyNet), the head and the dueling value head are
    `NoisyLinear` layers with initial noise scale `noise_scale` (the paper's
    `sigma0`); the torso stays deterministic (Rainbow's Atari network also
    makes its one fully connected hidden layer noisy: here the torso is shared
    with every other agent, and the heads are the layers that set the action
    values). The network then takes `key=`, the noise's, and without one gives
    its outputs at the mean weights. A network without noisy layers ignores
    the key.
    """

    torso: Torso | RecurrentTorso
    head: eqx.nn.Linear | NoisyLinear
    value_head: eqx.nn.Linear | NoisyLinear | None
    num_actions: int = eqx.field(static=True)
    num_atoms: int | None = eqx.field(static=True)
    embedding: eqx.nn.Linear | None = None
    merge: eqx.nn.Linear | None = None

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        num_actions: int,
        hidden_sizes: Sequence[int],
        activation: str = "relu",
        dueling: bool = False,
        *,
        num_atoms: int | None = None,
        layer_norm: bool = False,
        torso: str = "auto",
        cell_size: int | None = None,
        quantile_embedding: int | None = None,
        noisy: bool = False,
        noise_scale: float = 0.5,
        key: PRNGKeyArray,
    ):
        k1, k2, k3 = jr.split(key, 3)
        atoms = num_atoms or 1
        if quantile_embedding is not None and num_atoms is not None:
            raise ValueError(
                "QNetwork: quantile_embedding (IQN's sampled quantiles) and "
                "num_atoms (fixed atoms) exclude each other; pass one"
            )
        self.torso = make_torso(
            obs_shape,
            hidden_sizes,
            activation,
            kind=torso,
            cell_size=cell_size,
            layer_norm=layer_norm,
            key=k1,
        )
        width = self.torso.out_size
        if noisy:
            if cell_size is not None:
                raise ValueError(
                    "QNetwork: noisy heads with a recurrent torso are not "
                    "supported yet; use a feed-forward torso or noisy=False"
                )
            layer = lambda i, o, k: NoisyLinear(i, o, sigma0=noise_scale, key=k)
        else:
            layer = lambda i, o, k: _linear(i, o, 1.0, key=k)
        self.head = layer(width, num_actions * atoms, k2)
        self.value_head = layer(width, atoms, k3) if dueling else None
        self.num_actions = num_actions
        self.num_atoms = num_atoms
        if quantile_embedding is not None:
            if type(quantile_embedding) is not int or quantile_embedding <= 0:
                raise ValueError(
                    "QNetwork: quantile_embedding must be a positive integer, "
                    f"got {quantile_embedding!r}"
                )
            # Keys of their own: the other layers draw as without an embedding.
            k_embed, k_merge = jr.split(jr.fold_in(key, 1))
            width = self.torso.out_size
            self.embedding = _linear(quantile_embedding, width, np.sqrt(2), key=k_embed)
            self.merge = _linear(width, width, np.sqrt(2), key=k_merge)

    def __call__(
        self, obs: Shaped[Array, "..."], *, key: PRNGKeyArray | None = None
    ) -> Float[Array, " actions"] | Float[Array, "actions atoms"]:
        """The outputs at `obs`; `key` draws a noisy network's noise (without
        one: its mean weights)."""
        self._no_fractions()
        return self._q(self.torso(obs), key)

    def step(self, carry: PyTree, obs: Shaped[Array, "..."]) -> tuple[Array, PyTree]:
        """`(Q(obs, ·), carry)` through a recurrent torso's carry."""
        self._no_fractions()
        x, carry = self.torso.step(carry, obs)
        return self._q(x, None), carry

    def quantiles(
        self,
        obs: Shaped[Array, "..."],
        fractions: Float[Array, " n"],
        *,
        key: PRNGKeyArray | None = None,
    ) -> Float[Array, "actions n"]:
        """Each action's return quantile at each of `fractions` (in [0, 1]),
        for a network built with `quantile_embedding`; `key` as in `__call__`
        (one noise draw for every fraction)."""
        if self.embedding is None or self.merge is None:
            raise TypeError(
                "QNetwork.quantiles needs a network built with quantile_embedding "
                "(IQN's); call the network on the observation instead"
            )
        x = self.torso(obs)
        size = self.embedding.in_features
        assert isinstance(size, int)
        phi = jax.nn.relu(jax.vmap(self.embedding)(cosine_embedding(fractions, size)))
        fn = ACTIVATIONS[self._activation]
        merged = jax.vmap(lambda p: fn(self.merge(x * p)))(phi)  # pyright: ignore
        return jax.vmap(lambda m: self._q(m, key), out_axes=1)(merged)

    @property
    def _activation(self) -> str:
        torso = self.torso
        return (torso.body if isinstance(torso, RecurrentTorso) else torso).activation

    def _no_fractions(self) -> None:
        if self.embedding is not None:
            raise TypeError(
                "this QNetwork gives quantiles at sampled fractions (IQN's): call "
                "network.quantiles(obs, fractions)"
            )

    def _q(self, x: Float[Array, " features"], key: PRNGKeyArray | None) -> Array:
        if isinstance(self.head, NoisyLinear):
            k_head, k_value = (None, None) if key is None else jr.split(key)
            head = lambda x: self.head(x, key=k_head)  # pyright: ignore[reportCallIssue]
            value = lambda x: self.value_head(x, key=k_value)  # pyright: ignore
        else:
            head, value = self.head, self.value_head
        q = head(x).reshape(self.num_actions, self.num_atoms or 1)
        if self.value_head is not None:
            assert value is not None
            q = value(x)[None, :] + q - jnp.mean(q, axis=0, keepdims=True)
        return q if self.num_atoms else q[:, 0]


@final
class Critic(eqx.Module):
    """State value `V(obs)`; with `features`, only a head on another network's
    features of that size (a torso shared with the actor: `from_features`)."""

    torso: Torso | RecurrentTorso | None
    head: eqx.nn.Linear

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        hidden_sizes: Sequence[int],
        activation: str = "tanh",
        *,
        torso: str = "auto",
        cell_size: int | None = None,
        features: int | None = None,
        key: PRNGKeyArray,
    ):
        k1, k2 = jr.split(key)
        if features is None:
            self.torso = make_torso(
                obs_shape,
                hidden_sizes,
                activation,
                kind=torso,
                cell_size=cell_size,
                key=k1,
            )
            features = self.torso.out_size
        else:
            self.torso = None
        self.head = _linear(features, 1, 1.0, key=k2)

    def _own_torso(self) -> "Torso | RecurrentTorso":
        if self.torso is None:
            raise TypeError(
                "this critic shares the actor's torso: call from_features on the "
                "actor torso's features"
            )
        return self.torso

    def __call__(self, obs: Shaped[Array, "..."]) -> Float[Array, ""]:
        return self.head(self._own_torso()(obs))[0]

    def step(self, carry: PyTree, obs: Shaped[Array, "..."]) -> tuple[Array, PyTree]:
        """`(V(obs), carry)` through a recurrent torso's carry."""
        x, carry = self._own_torso().step(carry, obs)
        return self.head(x)[0], carry

    def from_features(self, x: Float[Array, " features"]) -> Float[Array, ""]:
        """The value from a torso's features `x`."""
        return self.head(x)[0]


class AbstractActor(eqx.Module):
    """A policy network: a torso (memoryless or recurrent) and a linear head
    whose small initial gain keeps the first policy close to uniform (or to
    zero mean). What the head's output means is `output`: the logits of
    `DiscreteActor`, the mean (and a learnt log standard deviation) of
    `GaussianActor`."""

    torso: eqx.AbstractVar[Torso | RecurrentTorso]
    head: eqx.AbstractVar[eqx.nn.Linear]

    @abc.abstractmethod
    def output(self, h: Float[Array, " out"]) -> PyTree:
        """The policy's parameters from the head's output `h`."""

    def __call__(self, obs: Shaped[Array, "..."]) -> PyTree:
        return self.output(self.head(self.torso(obs)))

    def step(self, carry: PyTree, obs: Shaped[Array, "..."]) -> tuple[PyTree, PyTree]:
        """`(output, carry)` through a recurrent torso's carry."""
        x, carry = self.torso.step(carry, obs)
        return self.output(self.head(x)), carry

    def from_features(self, x: Float[Array, " features"]) -> PyTree:
        """The policy's parameters from the torso's features `x`."""
        return self.output(self.head(x))


def _actor_parts(
    obs_shape: tuple[int, ...],
    out: int,
    hidden_sizes: Sequence[int],
    activation: str,
    torso: str,
    cell_size: int | None,
    key: PRNGKeyArray,
) -> tuple[Torso | RecurrentTorso, eqx.nn.Linear]:
    k1, k2 = jr.split(key)
    body = make_torso(
        obs_shape, hidden_sizes, activation, kind=torso, cell_size=cell_size, key=k1
    )
    # A small final gain keeps the initial policy close to uniform.
    return body, _linear(body.out_size, out, 0.01, key=k2)


@final
class DiscreteActor(AbstractActor):
    """Logits of a categorical policy."""

    torso: Torso | RecurrentTorso
    head: eqx.nn.Linear

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        num_actions: int,
        hidden_sizes: Sequence[int],
        activation: str = "tanh",
        *,
        torso: str = "auto",
        cell_size: int | None = None,
        key: PRNGKeyArray,
    ):
        self.torso, self.head = _actor_parts(
            obs_shape, num_actions, hidden_sizes, activation, torso, cell_size, key
        )

    def output(self, h: Float[Array, " actions"]) -> Float[Array, " actions"]:
        return h


@final
class GaussianActor(AbstractActor):
    """Mean and log standard deviation of a diagonal Gaussian policy; the log
    standard deviation is a state-independent parameter."""

    torso: Torso | RecurrentTorso
    head: eqx.nn.Linear
    log_std: Float[Array, " action_dim"]

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        action_dim: int,
        hidden_sizes: Sequence[int],
        activation: str = "tanh",
        log_std_init: float | Float[Array, ""] = 0.0,
        *,
        torso: str = "auto",
        cell_size: int | None = None,
        key: PRNGKeyArray,
    ):
        self.torso, self.head = _actor_parts(
            obs_shape, action_dim, hidden_sizes, activation, torso, cell_size, key
        )
        self.log_std = jnp.full((action_dim,), log_std_init, dtype=jnp.float32)

    def output(
        self, h: Float[Array, " action_dim"]
    ) -> tuple[Float[Array, " action_dim"], Float[Array, " action_dim"]]:
        return h, self.log_std


@final
class QCritic(eqx.Module):
    """Action value `Q(obs, action)` of a continuous action: the torso's
    features of the observation (flattened, or after the convolution) joined by
    the action, through the dense layers. With `quantiles`, the critic gives
    that many quantiles of the return instead (`[quantiles]`, TQC's)."""

    torso: Torso
    head: eqx.nn.Linear
    quantiles: int | None = eqx.field(static=True)

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        action_dim: int,
        hidden_sizes: Sequence[int],
        activation: str = "relu",
        *,
        torso: str = "auto",
        quantiles: int | None = None,
        key: PRNGKeyArray,
    ):
        k1, k2, k3 = jr.split(key, 3)
        body = Torso(
            obs_shape,
            hidden_sizes,
            activation,
            kind=torso,
            extra_inputs=action_dim,
            orthogonal=False,
            key=k1,
        )
        head = eqx.nn.Linear(body.out_size, quantiles or 1, key=k2)
        self.torso, self.head = uniform_fan_in((body, head), key=k3)
        self.quantiles = quantiles

    def __call__(
        self, obs: Shaped[Array, "..."], action: Float[Array, " action_dim"]
    ) -> Float[Array, ""] | Float[Array, " quantiles"]:
        out = self.head(self.torso(obs, action))
        return out if self.quantiles else out[0]


def q_ensemble(
    n: int,
    obs_shape: tuple[int, ...],
    action_dim: int,
    hidden_sizes: Sequence[int],
    activation: str,
    *,
    torso: str = "auto",
    quantiles: int | None = None,
    key: PRNGKeyArray,
) -> QCritic:
    """`n` independent critics stacked along a leading axis of every parameter,
    evaluated together with `ensemble_q` (one batched pass, not `n`)."""
    return eqx.filter_vmap(
        lambda k: QCritic(
            obs_shape,
            action_dim,
            hidden_sizes,
            activation,
            torso=torso,
            quantiles=quantiles,
            key=k,
        )
    )(jr.split(key, n))


def ensemble_q(
    critics: QCritic, obs: Shaped[Array, "..."], action: Float[Array, " action_dim"]
) -> Float[Array, " n"] | Float[Array, "n quantiles"]:
    """Every critic's `Q(obs, action)` of a `q_ensemble` (`[n, quantiles]`
    for quantile critics)."""
    return eqx.filter_vmap(lambda c: c(obs, action))(critics)


@final
class BatchNorm(eqx.Module):
    """Batch normalisation (Ioffe & Szegedy, 2015) over the leading axis of a
    batch `[batch, features]`, its running statistics kept in an
    `eqx.nn.State`.

    In training mode (`inference=False`) the batch's own mean and (biased)
    variance normalise it, and the running statistics move a fraction
    `1 - momentum` of the way toward them; in inference mode the running
    statistics normalise. A learnt scale and shift follow.

    Not `eqx.nn.BatchNorm`: that layer reduces over a named `vmap` axis, and
    keeps its axis name (a string) and its mode (a bool) as pytree leaves,
    which cannot ride in the runners' `lax.scan` carry; this one takes the
    batch as an array axis and keeps only arrays.
    """

    weight: Float[Array, " n"]
    bias: Float[Array, " n"]
    stats: eqx.nn.StateIndex
    momentum: float = eqx.field(static=True)
    eps: float = eqx.field(static=True)

    def __init__(self, size: int, *, momentum: float = 0.99, eps: float = 1e-3):
        self.weight = jnp.ones((size,))
        self.bias = jnp.zeros((size,))
        self.stats = eqx.nn.StateIndex((jnp.zeros((size,)), jnp.ones((size,))))
        self.momentum = momentum
        self.eps = eps

    def __call__(
        self, x: Float[Array, "batch n"], state: eqx.nn.State, *, inference: bool
    ) -> tuple[Float[Array, "batch n"], eqx.nn.State]:
        running_mean, running_var = state.get(self.stats)
        if inference:
            mean, var = running_mean, running_var
        else:
            mean = jnp.mean(x, axis=0)
            var = jnp.mean(jnp.square(x - mean[None]), axis=0)
            m = self.momentum
            moved = (
                m * running_mean + (1 - m) * jax.lax.stop_gradient(mean),
                m * running_var + (1 - m) * jax.lax.stop_gradient(var),
            )
            state = state.set(self.stats, moved)
        y = (x - mean[None]) * jax.lax.rsqrt(var + self.eps)[None]
        return y * self.weight[None] + self.bias[None], state


@final
class BatchNormQCritic(eqx.Module):
    """CrossQ's critic (Bhatt et al., 2024): `Q(obs, action)` of a whole batch,
    the joined input batch-normalised, then dense layers each followed by the
    activation and batch normalisation, then a linear head.

    Unlike the other networks it takes a batch (`[batch, ...]` observations,
    `[batch, action_dim]` actions), since its normalisation reduces over it,
    and an `eqx.nn.State` with the running statistics; build it with
    `eqx.nn.make_with_state`.
    """

    norms: tuple[BatchNorm, ...]
    layers: tuple[eqx.nn.Linear, ...]
    head: eqx.nn.Linear
    activation: str = eqx.field(static=True)

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        action_dim: int,
        hidden_sizes: Sequence[int],
        activation: str = "relu",
        *,
        momentum: float = 0.99,
        eps: float = 1e-3,
        key: PRNGKeyArray,
    ):
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"unknown activation {activation!r}; valid ones: {sorted(ACTIVATIONS)}"
            )
        sizes = [int(np.prod(obs_shape)) + action_dim, *hidden_sizes]
        keys = jr.split(key, len(sizes) + 1)
        self.norms = tuple(BatchNorm(n, momentum=momentum, eps=eps) for n in sizes)
        self.layers = tuple(
            eqx.nn.Linear(a, b, key=k)
            for a, b, k in zip(sizes[:-1], sizes[1:], keys[:-2], strict=True)
        )
        head = eqx.nn.Linear(sizes[-1], 1, key=keys[-2])
        self.layers, self.head = uniform_fan_in((self.layers, head), key=keys[-1])
        self.activation = activation

    def __call__(
        self,
        obs: Shaped[Array, "batch ..."],
        action: Float[Array, "batch action_dim"],
        state: eqx.nn.State,
        *,
        inference: bool,
    ) -> tuple[Float[Array, " batch"], eqx.nn.State]:
        fn = ACTIVATIONS[self.activation]
        x = jnp.concatenate(
            [obs.reshape(obs.shape[0], -1).astype(action.dtype), action], axis=-1
        )
        x, state = self.norms[0](x, state, inference=inference)
        for layer, norm in zip(self.layers, self.norms[1:], strict=True):
            x = fn(jax.vmap(layer)(x))
            x, state = norm(x, state, inference=inference)
        return jax.vmap(self.head)(x)[:, 0], state


def batch_norm_q_ensemble(
    n: int,
    obs_shape: tuple[int, ...],
    action_dim: int,
    hidden_sizes: Sequence[int],
    activation: str,
    *,
    momentum: float = 0.99,
    key: PRNGKeyArray,
) -> tuple[BatchNormQCritic, eqx.nn.State]:
    """`n` `BatchNormQCritic`s stacked along a leading axis, and their states."""
    make = eqx.nn.make_with_state(BatchNormQCritic)
    return eqx.filter_vmap(
        lambda k: make(
            obs_shape, action_dim, hidden_sizes, activation, momentum=momentum, key=k
        )
    )(jr.split(key, n))


def batch_norm_ensemble_q(
    critics: BatchNormQCritic,
    state: eqx.nn.State,
    obs: Shaped[Array, "batch ..."],
    action: Float[Array, "batch action_dim"],
    *,
    inference: bool,
) -> tuple[Float[Array, "batch n"], eqx.nn.State]:
    """Every critic's `Q(obs, action)` over a batch, `[batch, n]`, and the
    critics' states (moved only in training mode)."""
    q, state = eqx.filter_vmap(lambda c, s: c(obs, action, s, inference=inference))(
        critics, state
    )
    return q.T, state


@final
class DeterministicActor(eqx.Module):
    """A deterministic policy with actions in `[-1, 1]` (tanh output)."""

    torso: Torso
    head: eqx.nn.Linear

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        action_dim: int,
        hidden_sizes: Sequence[int],
        activation: str = "relu",
        *,
        torso: str = "auto",
        key: PRNGKeyArray,
    ):
        k1, k2, k3 = jr.split(key, 3)
        body = Torso(
            obs_shape, hidden_sizes, activation, kind=torso, orthogonal=False, key=k1
        )
        head = eqx.nn.Linear(body.out_size, action_dim, key=k2)
        self.torso, self.head = uniform_fan_in((body, head), key=k3)

    def __call__(self, obs: Shaped[Array, "..."]) -> Float[Array, " action_dim"]:
        return jnp.tanh(self.head(self.torso(obs)))


@final
class SquashedGaussianActor(eqx.Module):
    """Mean and log standard deviation of a Gaussian whose samples are squashed
    into `[-1, 1]` by tanh; the log standard deviation depends on the state and is
    kept within `log_std_bounds` (smoothly, by a rescaled tanh)."""

    torso: Torso
    head: eqx.nn.Linear
    log_std_bounds: tuple[float, float] = eqx.field(static=True)

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        action_dim: int,
        hidden_sizes: Sequence[int],
        activation: str = "relu",
        log_std_bounds: tuple[float, float] = (-5.0, 2.0),
        *,
        torso: str = "auto",
        key: PRNGKeyArray,
    ):
        k1, k2, k3 = jr.split(key, 3)
        body = Torso(
            obs_shape, hidden_sizes, activation, kind=torso, orthogonal=False, key=k1
        )
        head = eqx.nn.Linear(body.out_size, 2 * action_dim, key=k2)
        self.torso, self.head = uniform_fan_in((body, head), key=k3)
        self.log_std_bounds = log_std_bounds

    def __call__(
        self, obs: Shaped[Array, "..."]
    ) -> tuple[Float[Array, " action_dim"], Float[Array, " action_dim"]]:
        mean, raw = jnp.split(self.head(self.torso(obs)), 2)
        low, high = self.log_std_bounds
        log_std = low + 0.5 * (high - low) * (jnp.tanh(raw) + 1.0)
        return mean, log_std


@final
class SDEActor(eqx.Module):
    """A tanh-squashed Gaussian policy with generalised state-dependent
    exploration (gSDE; Raffin, Kober and Stulp, 2022).

    The mean comes from the torso's features `z(s)` (clipped to
    `±mean_clip` before squashing). The exploration noise is `z(s) @ W`, with
    `W[i, j] ~ N(0, exp(log_std[i, j])^2)` drawn once per sampling period, not
    per step: for one `W` the noise is a smooth function of the state, and at a
    state it is Gaussian with standard deviation
    `sqrt(sum_i z_i(s)^2 exp(2 log_std[i, j]))`, which gives the log-density.
    The features are not trained through the noise (`stop_gradient`), as in
    gSDE's default. `noise_key` is where an agent's exploration matrices come
    from (not learnt: it is not an inexact array, so optimizers skip it).
    """

    torso: Torso
    head: eqx.nn.Linear
    log_std: Float[Array, "latent action_dim"]
    noise_key: PRNGKeyArray
    mean_clip: float = eqx.field(static=True, default=2.0)

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        action_dim: int,
        hidden_sizes: Sequence[int],
        activation: str = "relu",
        log_std_init: float = -3.0,
        *,
        torso: str = "auto",
        key: PRNGKeyArray,
    ):
        k1, k2, k3, k4 = jr.split(key, 4)
        body = Torso(
            obs_shape, hidden_sizes, activation, kind=torso, orthogonal=False, key=k1
        )
        head = eqx.nn.Linear(body.out_size, action_dim, key=k2)
        self.torso, self.head = uniform_fan_in((body, head), key=k3)
        self.log_std = jnp.full((body.out_size, action_dim), log_std_init)
        self.noise_key = k4

    def __call__(
        self, obs: Shaped[Array, "..."]
    ) -> tuple[Float[Array, " action_dim"], Float[Array, " latent"]]:
        """The (pre-squash) mean and the features the noise is built on."""
        features = self.torso(obs)
        mean = jnp.clip(self.head(features), -self.mean_clip, self.mean_clip)
        return mean, features

    def matrix(self, key: PRNGKeyArray) -> Float[Array, "latent action_dim"]:
        """An exploration matrix `W`: standard normal draws scaled by `exp(log_std)`
        (differentiable in `log_std`)."""
        return jnp.exp(self.log_std) * jr.normal(key, self.log_std.shape)

    def noise(
        self, features: Float[Array, " latent"], w: Float[Array, "latent action_dim"]
    ) -> Float[Array, " action_dim"]:
        return jax.lax.stop_gradient(features) @ w

    def noise_log_std(
        self, features: Float[Array, " latent"]
    ) -> Float[Array, " action_dim"]:
        """The log standard deviation of the noise at these features."""
        z2 = jax.lax.stop_gradient(features) ** 2
        return 0.5 * jnp.log(z2 @ jnp.exp(2.0 * self.log_std) + 1e-6)
