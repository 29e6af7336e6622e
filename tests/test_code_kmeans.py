"""k-means of binary codes (kernels/code_kmeans.py), the code-space quantiser of the inverted
file, against brute force; and its lists against their untrained start on real codes."""

import numpy as np
import pytest

from dask_hashcodes.kernels.code_kmeans import binary_centres, code_signs, nearest_code_centres
from dask_hashcodes.kernels.codes import pack_signs
from dask_hashcodes.kernels.hamming import hamming_distances, hamming_topk
from dask_hashcodes.kernels.ivf import list_layout, probed_code_lists, search_lists
from dask_hashcodes.kernels.kmeans import lloyd_sums, updated_centres


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


def test_codes_are_clustered_as_signs_and_centroids_made_binary_by_theirs():
    """Each bit a +-1 coordinate (numpy's packbits order); a centroid's bit set where more of
    its codes set it than not, cleared on a tie; the step sums of +-1 are whole numbers, the
    same for any chunking."""
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 256, (2000, 3), dtype=np.uint8)
    signs = code_signs(codes)
    np.testing.assert_array_equal(signs, np.unpackbits(codes, axis=1) * 2.0 - 1.0)
    np.testing.assert_array_equal(binary_centres(signs), codes)
    assert binary_centres(np.array([[0.0, 1e-9, -1e-9, 0.5, -0.5, 0, 0, 0]]))[0, 0] == 0b01010000
    centres = signs[rng.choice(2000, 16, replace=False)] * 0.5
    whole = lloyd_sums(codes, centres, transform=code_signs)
    parts = [lloyd_sums(codes[start : start + 333], centres, transform=code_signs) for start in range(0, 2000, 333)]
    np.testing.assert_array_equal(sum(p[0] for p in parts), whole[0])
    np.testing.assert_array_equal(sum(p[1] for p in parts), whole[1])
    assert (whole[1] == np.round(whole[1])).all()


def _kmeans_of_codes(codes, n_lists, steps, seed=0):
    rng = np.random.default_rng(seed)
    centres = code_signs(codes[np.sort(rng.choice(len(codes), n_lists, replace=False))])
    for _ in range(steps):
        counts, sums, _ = lloyd_sums(codes, centres, transform=code_signs)
        centres = updated_centres(centres, counts, sums)
    return binary_centres(centres)


def test_lists_of_real_codes_find_more_neighbours_per_probe_than_their_start(fmnist_rows):
    """Fashion-MNIST images as 64-bit codes (signs of their top principal components): 10
    steps' lists hold more of each query's exact Hamming top-10 in its 4 nearest lists than
    the drawn start's lists do; the search over them is brute force over the probed lists."""
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

    start = _kmeans_of_codes(database, 50, 0)
    trained = _kmeans_of_codes(database, 50, 10)
    before, after = recall(start), recall(trained)
    assert after >= before + 0.05, (before, after)
