"""Nearest others within one set (kernels/knn.py): the cell search against the exact one."""

import numpy as np
import pytest

from dask_hashcodes.kernels.kmeans import nearest_centres
from dask_hashcodes.kernels.knn import cell_partition, knn_recall, nearest_others


def _exact(X, k):
    d2 = ((X[:, None, :] - X[None]) ** 2).sum(-1)
    np.fill_diagonal(d2, np.inf)
    return np.argsort(d2, axis=1, kind="stable")[:, :k]


def test_the_exact_search_equals_a_brute_force_sort_and_never_returns_the_point_itself():
    X = np.random.default_rng(0).standard_normal((300, 5))
    X[7] = X[3]  # a duplicate ranks at distance 0, before or after the point itself
    nearest = nearest_others(X, 6, np.random.default_rng(1))
    np.testing.assert_array_equal(nearest, _exact(X, 6))


def test_the_cell_search_probing_every_cell_is_the_exact_search():
    X = np.random.default_rng(2).standard_normal((400, 4))
    nearest = nearest_others(X, 5, np.random.default_rng(3), "cells", probes=400)
    np.testing.assert_array_equal(nearest, _exact(X, 5))


def test_the_cell_search_finds_most_neighbours_of_real_images(fmnist_rows):
    X = fmnist_rows[0].astype(np.float64)
    rows = np.arange(0, len(X), 10)
    few = knn_recall(X, rows, nearest_others(X, 10, np.random.default_rng(0), "cells", probes=2)[rows])
    default = knn_recall(X, rows, nearest_others(X, 10, np.random.default_rng(0), "cells")[rows])
    # more probed cells find more of the true neighbours; the default finds most of them
    assert few < default and default >= 0.9, (few, default)


def test_the_cell_search_gives_every_point_k_distinct_others_even_in_tiny_cells():
    rng = np.random.default_rng(4)
    X = np.concatenate([rng.standard_normal((50, 3)), 100 + rng.standard_normal((3, 3))])  # a far cluster of 3
    nearest = nearest_others(X, 4, np.random.default_rng(5), "cells", probes=1)
    assert nearest.shape == (53, 4) and (nearest >= 0).all()
    for i, row in enumerate(nearest):
        assert i not in row and len(set(row)) == 4


def test_nearest_centres_lists_them_nearest_first():
    rng = np.random.default_rng(6)
    X, centres = rng.standard_normal((2500, 3)), rng.standard_normal((20, 3))  # rows over several slabs
    d2 = ((X[:, None, :] - centres[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(nearest_centres(X, centres, 5), np.argsort(d2, axis=1, kind="stable")[:, :5])
    np.testing.assert_array_equal(nearest_centres(X, centres), d2.argmin(axis=1))
    np.testing.assert_array_equal(nearest_centres(X, centres, 20), np.argsort(d2, axis=1, kind="stable"))


def test_nearest_centres_in_float32_gives_float64s_answer_where_float32_cannot_tell_centres_apart():
    rng = np.random.default_rng(9)
    # large offsets and centres a float32 unit apart: float32 scores of these rows tie or swap
    offset = 1e4
    base = offset + rng.standard_normal((40, 16))
    centres = np.concatenate([base, base + 1e-3, base[:5]])  # near twins, and exact twins (ties: lower index)
    X = np.concatenate([offset + rng.standard_normal((3000, 16)), centres + 5e-4])
    d2 = ((X[:, None, :] - centres[None]) ** 2).sum(-1)
    expected = np.argsort(d2, axis=1, kind="stable")
    np.testing.assert_array_equal(nearest_centres(X, centres), expected[:, 0])
    np.testing.assert_array_equal(nearest_centres(X, centres, 3), expected[:, :3])
    twins = nearest_centres(centres[:5], centres, 2)
    np.testing.assert_array_equal(twins[:, 0], np.arange(5))  # an exact twin goes to the lower index
    # uint8 rows (the SIFT case) are scored without converting the array to float64
    codes = rng.integers(0, 256, (2000, 32), dtype=np.uint8)
    byte_centres = codes[rng.choice(2000, 64, replace=False)].astype(np.float64) + 0.5
    d2 = ((codes[:, None, :].astype(np.float64) - byte_centres[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(nearest_centres(codes, byte_centres, 4), np.argsort(d2, axis=1, kind="stable")[:, :4])


def test_cells_partition_the_points_and_a_seed_fixes_them():
    X = np.random.default_rng(7).standard_normal((1000, 4))
    centres, cell = cell_partition(X, 30, np.random.default_rng(8))
    again = cell_partition(X, 30, np.random.default_rng(8))
    np.testing.assert_array_equal(cell, again[1])
    assert centres.shape == (30, 4) and cell.min() >= 0 and cell.max() < 30
    assert len(np.unique(cell)) > 20


@pytest.mark.parametrize("search", ["both", "nonsense"])
def test_unknown_search_or_too_few_points_are_errors(search):
    X = np.zeros((5, 2))
    with pytest.raises(ValueError, match="unknown neighbour search"):
        nearest_others(X, 2, np.random.default_rng(0), search)
    with pytest.raises(ValueError, match="5 points have no 5 nearest others"):
        nearest_others(X, 5, np.random.default_rng(0))


def test_neighbour_recall_counts_the_first_k_and_never_the_padding():
    from dask_hashcodes.kernels.knn import neighbour_recall

    exact = np.array([[3, 1, 2, 9], [5, 6, 7, 8]])
    found = np.array([[1, 2, 4], [-1, -1, 6]])
    # row 0: 1 and 2 of {3, 1, 2}; row 1: 6 of {5, 6, 7}; -1 never counts
    assert neighbour_recall(found, exact) == (2 + 1) / 6
