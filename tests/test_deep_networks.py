"""The deep hash functions' networks: built from JSON-able specs, weights round-tripped
through plain arrays, unknown or damaged ones refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dask_hashcodes.errors import InputError

torch = pytest.importorskip("torch")

from dask_hashcodes.deep.networks import build_network, load_state_arrays, register_network, state_arrays  # noqa: E402


@pytest.mark.parametrize(
    ("spec", "shape"),
    [({"name": "cnn"}, (28, 28)), ({"name": "cnn", "channels": [8]}, (3, 32, 32)), ({"name": "mlp"}, (384,))],
)
def test_a_network_rebuilt_from_its_spec_and_arrays_gives_the_same_outputs(spec, shape):
    torch.manual_seed(0)
    net = build_network(json.loads(json.dumps(spec)), 24, shape).eval()
    x = torch.randn(5, int(np.prod(shape)))
    arrays = state_arrays(net)
    assert all(isinstance(a, np.ndarray) for a in arrays.values())
    torch.manual_seed(1)  # a different initialisation, overwritten by the saved weights
    again = build_network(spec, 24, shape).eval()
    load_state_arrays(again, arrays)
    with torch.no_grad():
        out = net(x)
        assert out.shape == (5, 24)
        torch.testing.assert_close(again(x), out, rtol=0, atol=0)


def test_unknown_or_damaged_networks_are_refused():
    with pytest.raises(InputError, match="unknown network 'resnet'.*register_network"):
        build_network({"name": "resnet"}, 8, (28, 28))
    with pytest.raises(InputError, match="network 'mlp'.*width"):
        build_network({"name": "mlp", "width": 3}, 8, (10,))
    with pytest.raises(InputError, match=r"dropout 1.0 is not in \[0, 1\)"):
        build_network({"name": "cnn", "dropout": 1.0}, 8, (28, 28))
    with pytest.raises(InputError, match="too small.*mlp"):
        build_network({"name": "cnn"}, 8, (8, 8))
    net = build_network({"name": "mlp", "hidden": [16]}, 8, (10,))
    arrays = state_arrays(net)
    arrays["network.1.weight"] = arrays["network.1.weight"][:, :5]
    with pytest.raises(KeyError, match="network.1.weight"):
        load_state_arrays(net, arrays)
    del arrays["network.1.weight"]
    with pytest.raises(KeyError, match="1.weight"):
        load_state_arrays(net, arrays)


def test_a_registered_factory_builds_from_its_name():
    register_network(
        "tiny-linear", lambda n_bits, input_shape, scale=1: torch.nn.Linear(int(np.prod(input_shape)), n_bits)
    )
    assert build_network({"name": "tiny-linear", "scale": 2}, 4, (6,))(torch.zeros(2, 6)).shape == (2, 4)


def test_dropout_changes_training_outputs_only_and_not_the_saved_weights_names():
    torch.manual_seed(0)
    plain = build_network({"name": "cnn", "dropout": 0.0}, 16, (28, 28))
    dropping = build_network({"name": "cnn"}, 16, (28, 28))  # dropout 0.5 by default
    assert state_arrays(plain).keys() == state_arrays(dropping).keys()
    load_state_arrays(dropping, state_arrays(plain))
    x = torch.randn(4, 28 * 28)
    with torch.no_grad():
        torch.testing.assert_close(dropping.eval()(x), plain.eval()(x), rtol=0, atol=0)
        assert not torch.equal(dropping.train()(x), plain.train()(x))
