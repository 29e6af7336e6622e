"""What the deep hash functions (ADSH, DPSH) share: a network chosen by the input's shape
(or given as a spec), inputs shifted by one mean vector and divided by one scale, bits
sign(F(x)), and the weights saved as plain arrays beside the JSON parameters (no pickle)."""

from __future__ import annotations

import numpy as np

from dask_hashcodes.deep.networks import BUILT_IN_NETWORKS
from dask_hashcodes.errors import InputError, shape_words
from dask_hashcodes.hashing.base import Hasher
from dask_hashcodes.hashing.constraints import Options
from dask_hashcodes.kernels.codes import pack_signs
from dask_hashcodes.storage.npz import FLOAT

# a network by its name (the built-in ones, or one a library user registered), a spec
# {"name": ..., **kwargs}, or None: chosen by the input's shape. The built-in names are what
# the command line offers.
NETWORK = [Options(BUILT_IN_NETWORKS), str, dict, None]
# a row's shape as the network's input, e.g. (28, 28) or (3, 32, 32); None: by its size
INPUT_SHAPE = [tuple, list, None]


def default_network(n_features: int) -> tuple[dict, tuple]:
    """(spec, input shape) when none is given: square images (28 x 28, 32 x 32, and 3 x k x k
    colour) get the cnn, anything else the mlp."""
    side = int(round(np.sqrt(n_features)))
    if side * side == n_features and side >= 16:
        return {"name": "cnn"}, (side, side)
    side = int(round(np.sqrt(n_features / 3)))
    if 3 * side * side == n_features and side >= 16:
        return {"name": "cnn"}, (3, side, side)
    return {"name": "mlp"}, (n_features,)


class DeepHashFunction(Hasher):
    """Base of the estimators whose hash function is a torch network (parameters ``network``
    and ``input_shape``; learned ``network_``, ``mean_``, ``scale_``)."""

    # keyword arguments a method gives a network of a kind ({"cnn": {...}}) where its spec
    # does not name them
    default_network_options: dict = {}

    def _network_spec(self, n_features: int | None = None) -> tuple[dict, tuple]:
        n_features = self.n_features_in_ if n_features is None else n_features
        spec, shape = default_network(n_features)
        if self.network is not None:
            spec = {"name": self.network} if isinstance(self.network, str) else dict(self.network)
        spec = {**self.default_network_options.get(spec.get("name"), {}), **spec}  # what the spec names wins
        if self.input_shape is not None:
            shape = tuple(int(s) for s in self.input_shape)
        if int(np.prod(shape)) != n_features:
            raise InputError(
                f"{type(self).__name__}: input_shape {shape_words(shape)} holds {int(np.prod(shape))} values but the rows have "
                f"{n_features} features; give the shape of one row"
            )
        return spec, shape

    def _fit_scaling(self, X: np.ndarray) -> None:
        """One mean vector and one scale (the RMS distance to the mean) from sampled rows."""
        self.mean_ = X.mean(axis=0).astype(np.float32)
        self.scale_ = float(np.sqrt(((X - self.mean_) ** 2).mean())) or 1.0

    def _scaled(self, X):
        """Rows as the network's float32 input tensor."""
        import torch

        return torch.from_numpy(((np.asarray(X, dtype=np.float32) - self.mean_) / self.scale_).astype(np.float32))

    def _encode_kernel(self, block):
        return pack_signs(self._project_kernel(block))

    def _project_kernel(self, block):
        from dask_hashcodes.deep.training import network_outputs

        return network_outputs(self.network_, self._scaled(block))

    def _learned_arrays(self):
        from dask_hashcodes.deep.networks import state_arrays

        return {"mean_": self.mean_, "scale_": np.float64(self.scale_), **state_arrays(self.network_)}

    def _fitted_array_spec(self, n_features):
        """The network's weights are those of the network the parameters build for
        ``n_features`` inputs (names, dtypes and shapes of its state), built here without
        disturbing torch's random state."""
        from dask_hashcodes.deep.networks import build_network, require_torch, state_arrays

        spec, shape = self._network_spec(n_features)
        with require_torch().random.fork_rng(devices=[]):
            weights = state_arrays(build_network(spec, self.n_bits, shape))
        return {
            "mean_": (np.float32, (n_features,)),
            "scale_": (FLOAT, ()),
            **{name: (w.dtype, w.shape) for name, w in weights.items()},
        }

    def _set_learned_arrays(self, arrays, where="the learned arrays"):
        from dask_hashcodes.deep.networks import build_network, load_state_arrays

        self.check_learned_arrays(arrays, where)  # network weights are loaded into a network, not set as attributes
        self.mean_, self.scale_ = np.asarray(arrays["mean_"], dtype=np.float32), float(arrays["scale_"])
        spec, shape = self._network_spec()
        self.network_ = build_network(spec, self.n_bits, shape)
        load_state_arrays(self.network_, arrays)
