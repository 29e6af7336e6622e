"""The networks of the deep hash functions, described by JSON-able specs so that a saved
model holds no pickle: ``{"name": "cnn", ...}`` names a registered factory and its keyword
arguments; the weights travel as plain arrays (``state_arrays``) in the model's arrays.npz.

Built in:

* ``cnn`` for images (n, h, w) or (n, channels, h, w): two 5x5 convolutions with ReLU and
  2x2 max pooling, a fully connected hidden layer with ``dropout`` 0.5 (as in the fully
  connected layers of CNN-F, the ADSH paper's network; for ADSH it scored above no dropout
  on a validation split), then one output
  per bit;
* ``mlp`` for feature vectors: ``hidden`` fully connected ReLU layers (``dropout`` after
  each, 0 by default), then one output per bit.

Any other network: ``register_network(name, factory)`` with ``factory(n_bits, input_shape,
**kwargs) -> torch.nn.Module`` before training and before loading a model that uses it.
"""

from __future__ import annotations

import numpy as np

from dask_hashcodes.errors import InputError, shape_words

DEEP_EXTRA_HINT = "install the deep extra: pip install 'dask-hashcodes[deep]' (torch==2.13.0, the CPU build)"


def require_torch():
    """The torch module, or a one-line error naming the extra to install."""
    try:
        import torch
    except ImportError:
        raise InputError(f"deep hashing methods need PyTorch; {DEEP_EXTRA_HINT}") from None
    return torch


def _cnn(n_bits: int, input_shape, channels=(32, 64), hidden: int = 500, dropout: float = 0.5):
    torch = require_torch()
    nn = torch.nn
    shape = tuple(int(s) for s in input_shape)
    in_channels, h, w = (1, *shape) if len(shape) == 2 else shape
    layers, c = [], in_channels
    for out in channels:
        layers += [nn.Conv2d(c, out, 5), nn.ReLU(), nn.MaxPool2d(2)]
        c, h, w = out, (h - 4) // 2, (w - 4) // 2
    if h < 1 or w < 1:
        raise InputError(
            f"cnn: images of {shape_words(shape)} are too small for {len(channels)} 5x5 convolutions; use the mlp network"
        )
    return nn.Sequential(
        nn.Unflatten(1, (in_channels, *shape[-2:])),
        *layers,
        nn.Flatten(),
        nn.Linear(c * h * w, hidden),
        _relu(nn, dropout),
        nn.Linear(hidden, n_bits),
    )


def _mlp(n_bits: int, input_shape, hidden=(1024, 1024), dropout: float = 0.0):
    torch = require_torch()
    nn = torch.nn
    layers, d = [], int(np.prod(input_shape))
    for width in hidden:
        layers += [nn.Linear(d, width), _relu(nn, dropout)]
        d = width
    return nn.Sequential(nn.Flatten(), *layers, nn.Linear(d, n_bits))


def _relu(nn, dropout: float):
    """A hidden layer's ReLU, followed by dropout (active in training only) when ``dropout`` >
    0. Both sit in one module so that the layers' indices, and with them the names of a saved
    model's weights, do not depend on the dropout."""
    if not 0.0 <= float(dropout) < 1.0:
        raise InputError(f"dropout {dropout} is not in [0, 1); give the probability of zeroing a hidden unit")
    return nn.Sequential(nn.ReLU(), nn.Dropout(float(dropout))) if dropout > 0 else nn.ReLU()


_FACTORIES = {"cnn": _cnn, "mlp": _mlp}
BUILT_IN_NETWORKS = tuple(_FACTORIES)  # the networks every install has; register_network adds others


def register_network(name: str, factory) -> None:
    """Make ``{"name": name, **kwargs}`` specs build ``factory(n_bits, input_shape, **kwargs)``."""
    _FACTORIES[name] = factory


def build_network(spec: dict, n_bits: int, input_shape):
    """The network a spec describes; the inputs are flat rows (n, prod(input_shape))."""
    spec = dict(spec)
    name = spec.pop("name", None)
    if name not in _FACTORIES:
        raise InputError(
            f"unknown network {name!r} (known: {', '.join(sorted(_FACTORIES))}); register it with "
            "dask_hashcodes.deep.networks.register_network before training or loading"
        )
    try:
        return _FACTORIES[name](n_bits, input_shape, **spec)
    except TypeError as err:
        raise InputError(f"network {name!r}: {err}; see its factory's keyword arguments") from None


def state_arrays(net, prefix: str = "network.") -> dict[str, np.ndarray]:
    """The network's weights as numpy arrays (for arrays.npz)."""
    return {prefix + k: v.detach().cpu().numpy().copy() for k, v in net.state_dict().items()}


def load_state_arrays(net, arrays: dict, prefix: str = "network.") -> None:
    """Put saved weights into a freshly built network; a missing, extra or misshapen entry is
    a KeyError naming it (load_model reports it in one line)."""
    torch = require_torch()
    state = net.state_dict()
    saved = {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}
    wrong = sorted(set(state) ^ set(saved)) or sorted(k for k in state if tuple(state[k].shape) != saved[k].shape)
    if wrong:
        raise KeyError(prefix + ", ".join(wrong))
    net.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in saved.items()})
