"""k-majority (kernels/hamming_kmeans.py), the code-space quantiser of the inverted file,
against brute force; and its lists against their untrained start on real codes."""

import numpy as np
import pytest

from dask_hashcodes.kernels.codes import pack_signs
from dask_hashcodes.kernels.hamming import hamming_distances, hamming_topk
from dask_hashcodes.kernels.hamming_kmeans import majority_centres, majority_counts, nearest_code_centres
from dask_hashcodes.kernels.ivf import list_layout, probed_code_lists, search_lists


@pytest.mark.parametrize("bits, n_centres", [(64, 37), (24, 300), (128, 5000), (8, 7)])
def test_the_nearest_centre_code_is_brute_forces_with_ties_to_the_lower_centre(bits, n_centres):
    """Widths of one, several and padded words, and centres across more than one tile
    (5000 > 4096), some of them exact twins: the nearest by Hamming, the lower index on ties."""
    rng = np.random.default_rng(bits)
    codes = rng.integers(0, 256, (3000, bits // 8), dtype=np.uint8)
    centres = rng.integers(0, 256, (n_centres, bits // 8), dtype=np.uint8)
    centres[n_centres // 2] = centres[1]  # a twin: never chosen over centre 1
    dist = hamming_distances(codes, centres)
    np.testing.assert_array_equal(nearest_code_centres(codes, centres), dist.argmin(axis=1))
    assert n_centres // 2 not in nearest_code_centres(centres, centres)


def test_a_majority_step_is_brute_forces_and_adds_up_over_any_chunking():
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 256, (2000, 3), dtype=np.uint8)
    centres = codes[rng.choice(2000, 16, replace=False)]
    members, ones, total = majority_counts(codes, centres)
    nearest = hamming_distances(codes, centres).argmin(axis=1)
    bits = np.unpackbits(codes, axis=1).astype(np.int64)
    np.testing.assert_array_equal(members, np.bincount(nearest, minlength=16))
    for c in range(16):
        np.testing.assert_array_equal(ones[c], bits[nearest == c].sum(axis=0))
    assert total == hamming_distances(codes, centres).min(axis=1).sum()
    parts = [majority_counts(codes[start : start + 333], centres) for start in range(0, 2000, 333)]
    np.testing.assert_array_equal(sum(p[0] for p in parts), members)  # integer counts: any chunking, same centres
    np.testing.assert_array_equal(sum(p[1] for p in parts), ones)
    # each bit the majority of the centre's codes; a tie keeps the old bit, an empty centre stays
    members[3], ones[3] = 0, 0
    ones[5, 0], members[5] = 2, 4
    new = np.unpackbits(majority_centres(centres, members, ones), axis=1)
    old = np.unpackbits(centres, axis=1)
    np.testing.assert_array_equal(new[3], old[3])
    assert new[5, 0] == old[5, 0]
    want = (2 * ones > members[:, None]).astype(np.uint8)
    decided = 2 * ones != members[:, None]
    np.testing.assert_array_equal(new[decided], want[decided])


def _kmajority(codes, n_lists, steps, seed=0):
    rng = np.random.default_rng(seed)
    centres = codes[np.sort(rng.choice(len(codes), n_lists, replace=False))]
    totals = []
    for _ in range(steps):
        members, ones, total = majority_counts(codes, centres)
        totals.append(total)
        centres = majority_centres(centres, members, ones)
    return centres, totals


def test_kmajority_lists_of_real_codes_find_more_neighbours_per_probe_than_their_start(fmnist_rows):
    """Fashion-MNIST images as 64-bit codes (signs of their top principal components): the
    total Hamming distance to the centres never grows, and 10 steps' lists hold more of each
    query's exact Hamming top-10 in its 4 nearest lists than the drawn start's lists do; the
    search over them is brute force over the probed lists."""
    X, _ = fmnist_rows
    X = X - X.mean(axis=0)
    components = np.linalg.svd(X[:2000], full_matrices=False)[2][:64].T
    codes = pack_signs(X @ components)
    database, queries = codes[:2500], codes[2500:]
    true_d = hamming_topk(database, np.arange(2500), queries=queries, k=10)[0]

    def recall(centres):
        order, offsets = list_layout(nearest_code_centres(database, centres), len(centres))
        probes = probed_code_lists(queries, centres, 4)
        dist, ids = search_lists(queries, probes, database[order], order.astype(np.int64), offsets, 10)
        assignment = nearest_code_centres(database, centres)
        for q in range(0, len(queries), 50):  # brute force over the probed lists
            rows = np.flatnonzero(np.isin(assignment, probes[q]))
            d = hamming_distances(queries[q : q + 1], database[rows])[0]
            np.testing.assert_array_equal(ids[q], rows[np.lexsort((rows, d))[:10]])
        return float(np.minimum((dist <= true_d[:, 9:10]).sum(axis=1), 10).mean() / 10)

    start, _ = _kmajority(database, 50, 0)
    trained, totals = _kmajority(database, 50, 10)
    assert all(b <= a for a, b in zip(totals, totals[1:]))
    before, after = recall(start), recall(trained)
    assert after >= before + 0.05, (before, after)
