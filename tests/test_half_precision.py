"""float16 vectors (half-precision embeddings) are encoded and projected as the same values in
float32: the compiled kernels have no half-precision arithmetic, so the estimators widen
them first instead of failing inside a kernel."""

from __future__ import annotations

import numpy as np
import pytest

from dask_hashcodes.hashing.registry import make_hasher

# the methods whose encoders run compiled kernels on the rows as given
METHODS = ("lsh", "pcah", "itq", "isohash", "sh", "sikh", "bre", "dish")


@pytest.fixture(scope="module")
def rows():
    return np.random.default_rng(0).normal(size=(600, 16)).astype(np.float32)


@pytest.mark.parametrize("method", METHODS)
def test_float16_rows_encode_as_their_float32_values(rows, method):
    model = make_hasher(method, n_bits=16, random_state=0).fit(rows)
    half = rows[:64].astype(np.float16)
    np.testing.assert_array_equal(model.encode(half), model.encode(half.astype(np.float32)))


def test_float16_rows_project_as_their_float32_values(rows):
    model = make_hasher("itq", n_bits=16, random_state=0).fit(rows)
    half = rows[:64].astype(np.float16)
    np.testing.assert_array_equal(model.project(half), model.project(half.astype(np.float32)))
