"""MAC and its two-step baselines (pipeline/dask_hashcodes/hashing/mac.py): the loop's kernels against brute
force, the estimator's invariances and errors, and its quality on Fashion-MNIST."""

from __future__ import annotations

import numpy as np
import pytest
from distributed import Client
from scipy import sparse

from dask_hashcodes import InputError
from dask_hashcodes.hashing import make_hasher
from dask_hashcodes.hashing.mac import TWO_STEP_STARTS
from dask_hashcodes.kernels.affinity import affinity_loss, knn_affinities, label_affinities, neighbour_blocks
from dask_hashcodes.kernels.ranking import signs_precision_at_k
from dask_hashcodes.kernels.zstep import free_codes, z_steps


def _planted(n=60, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(classes), n // classes)
    centres = rng.standard_normal((classes, 5)) * 4
    X = centres[labels] + rng.standard_normal((n, 5))
    return X, labels, rng


def test_neighbour_blocks_cover_every_point_once_without_dissimilar_pairs():
    X, _, rng = _planted(90)
    Y = knn_affinities(X, 5, 20, rng)
    blocks = neighbour_blocks(Y, 8, np.random.default_rng(1))
    members = np.concatenate(blocks)
    np.testing.assert_array_equal(np.sort(members), np.arange(90))
    assert max(len(b) for b in blocks) <= 8 and any(len(b) > 1 for b in blocks)
    Yc = sparse.csr_matrix(Y)
    for block in blocks:
        local = Yc[block][:, block]
        assert (local.data >= 0).all(), "a block holds a dissimilar pair: its cut would not be exact"


@pytest.mark.parametrize("solver", ["cut", "quad"])
def test_free_codes_beat_random_codes_and_the_passes_stop_when_nothing_changes(solver):
    X, labels, rng = _planted(60)
    Y = label_affinities(labels, 5, 10, rng)
    blocks = [np.flatnonzero(labels == c) for c in range(3)]
    Z, _ = free_codes("ksh", Y, 4, solver, blocks, max_passes=5)
    random_codes = np.where(np.random.default_rng(2).random((60, 4)) < 0.5, -1.0, 1.0)
    assert set(np.unique(Z)) <= {-1.0, 1.0}
    assert affinity_loss("ksh", Z, Y) < 0.5 * affinity_loss("ksh", random_codes, Y)
    again, passes = z_steps("ksh", Z, Y, 0.0, np.zeros_like(Z), solver, blocks, max_passes=5)
    if passes < 5:  # a pass that changed nothing ended the loop: one more changes nothing either
        np.testing.assert_array_equal(again, z_steps("ksh", again, Y, 0.0, np.zeros_like(Z), solver, blocks, 1)[0])


def test_validation_precision_equals_a_brute_force_ranking():
    rng = np.random.default_rng(3)
    base = np.where(rng.random((50, 6)) < 0.5, -1.0, 1.0)
    queries = np.where(rng.random((7, 6)) < 0.5, -1.0, 1.0)
    relevant = rng.random((7, 50)) < 0.3
    k = 9
    hits = []
    for q, rel in zip(queries, relevant):
        distance = (q != base).sum(axis=1)
        order = np.lexsort((np.arange(50), distance))[:k]  # ties by index
        hits.append(rel[order].mean())
    assert signs_precision_at_k(queries, base, relevant, k) == pytest.approx(np.mean(hits))


def _path_without_timings(model):
    return [{k: v for k, v in e.items() if not k.endswith("_seconds")} for e in model.training_stats_["mac_path"]]


def test_codes_are_identical_for_one_and_two_workers(fmnist_rows, clusters):
    """The codes and every step of the MAC path (losses, mismatches, validation precisions,
    which steps were kept): the two-step start with the choice of C, then two iterations,
    each a Z-step and a warm-started h-step."""
    X, y = fmnist_rows[0][:1500], fmnist_rows[1][:1500]
    params = {"n_labeled": 600, "n_similar": 20, "n_dissimilar": 60, "validation_size": 100, "max_iter": 2}
    codes, paths = [], []
    for workers in (1, 2):
        TWO_STEP_STARTS.clear()  # each cluster computes its own start: the start is compared too
        with Client(clusters[workers]):
            model = make_hasher("maccut", 8, mu_start=5.0, **params).fit(X, y)
            codes.append(model.encode(X))
            paths.append(_path_without_timings(model))
    np.testing.assert_array_equal(codes[0], codes[1])
    assert len(paths[0]) == 3 and paths[0] == paths[1]
    # the SVMs' C was chosen on the validation rows: the first C of the best precision
    tried = model.training_stats_["svm_c_validation_precision"]
    assert list(tried) == ["1", "10", "100", "1000"]
    assert model.training_stats_["svm_c"] == float(max(tried, key=lambda c: (tried[c], -float(c))))


def test_an_equal_earlier_start_is_taken_and_gives_the_model_a_fresh_start_gives(fmnist_rows):
    """MACquad right after quad on the same rows (an evaluation's order) takes quad's two-step
    start instead of computing it: its weights, path and recorded numbers are those of a fit
    that computed its own, and its training time counts the start's seconds. A fit whose
    start inputs differ (another seed draws other training points) computes its own."""
    X, y = fmnist_rows[0][:1200], fmnist_rows[1][:1200]
    params = {"n_labeled": 500, "n_similar": 20, "n_dissimilar": 60, "validation_size": 100}
    TWO_STEP_STARTS.clear()
    quad = make_hasher("quad", 6, **params).fit(X, y)
    mac = make_hasher("macquad", 6, max_iter=3, **params).fit(X, y)
    stats, start = mac.training_stats_, quad.training_stats_["mac_path"][0]
    assert quad.training_stats_["start_reused"] is False and stats["start_reused"] is True
    assert stats["mac_path"][0] == start  # the start's entry, its seconds included
    assert stats["reused_seconds"] == pytest.approx(start["z_seconds"] + start["h_seconds"], abs=2e-3)  # ms rounding
    assert stats["reused_seconds"] > 0
    assert stats["train_seconds"] >= stats["reused_seconds"]
    assert mac.weights_.flags.writeable and not np.shares_memory(quad.weights_, mac.weights_)

    TWO_STEP_STARTS.clear()
    fresh = make_hasher("macquad", 6, max_iter=3, **params).fit(X, y)
    assert fresh.training_stats_["start_reused"] is False
    np.testing.assert_array_equal(fresh.weights_, mac.weights_)
    np.testing.assert_array_equal(fresh.intercepts_, mac.intercepts_)
    assert fresh.model_id == mac.model_id and len(stats["mac_path"]) > 1
    assert _path_without_timings(fresh) == _path_without_timings(mac)
    for name in ("svm_c", "svm_passes", "loss", "validation_precision", "free_codes_loss", "stopped"):
        assert fresh.training_stats_[name] == stats[name], name

    other = make_hasher("quad", 6, random_state=1, **params).fit(X, y)
    assert other.training_stats_["start_reused"] is False


def test_bad_input_gives_one_line_errors(fmnist_rows):
    X, y = fmnist_rows[0][:1200], fmnist_rows[1][:1200]
    with pytest.raises(
        InputError, match="500 training \\+ 2000 validation rows exceed the 1200 rows.*`validation_size`"
    ):
        make_hasher("cut", 8, n_labeled=500).fit(X, y)
    with pytest.raises(InputError, match="requires y to be passed.*affinity='knn'"):
        make_hasher("cut", 8, n_labeled=500, validation_size=200).fit(X)
    with pytest.raises(InputError, match="fewer than kappa\\+ \\+ 1.*`n_similar`"):
        make_hasher("cut", 8, n_labeled=500, n_similar=100, validation_size=200).fit(X, y)
    flat = np.repeat(X[:, 400:404], 2, axis=1)  # 8 columns of rank 4
    with pytest.raises(InputError, match="exceed the rank 4.*kernel"):
        make_hasher("quad", 6, n_labeled=500, n_similar=5, n_dissimilar=20, validation_size=200).fit(flat, y)


@pytest.mark.parametrize("database", ["held-out", "training"])
def test_validation_precision_is_the_brute_force_ranking_of_its_database(fmnist_rows, database):
    """The precision early stopping compares: by default (held-out) the even-numbered validation
    rows ranking the odd-numbered ones, which no SVM was fitted to; with 'training' the
    validation rows ranking the training points (brute force here)."""
    from dask_hashcodes.hashing.mac import _draw_rows

    X, y = fmnist_rows[0][:1000], fmnist_rows[1][:1000]
    params = {"n_labeled": 500, "n_similar": 20, "n_dissimilar": 60, "validation_size": 200}
    model = make_hasher("cut", 8, validation_database=database, **params).fit(X, y)
    train, val = _draw_rows(np.random.default_rng(model.seed_), len(X), 500, 200)
    queries, base = (val[0::2], val[1::2]) if database == "held-out" else (val, train)
    q_bits, b_bits = model._project_kernel(X[queries]) >= 0, model._project_kernel(X[base]) >= 0
    hits = []
    for bits, label in zip(q_bits, y[queries]):
        order = np.lexsort((np.arange(len(base)), (bits != b_bits).sum(axis=1)))[:20]  # ties by index
        hits.append((y[base][order] == label).mean())
    assert model.training_stats_["validation_precision"] == pytest.approx(np.mean(hits))
    if database == "held-out":
        with pytest.raises(InputError, match="at least 2 validation rows.*`validation_size`"):
            make_hasher("cut", 8, **{**params, "validation_size": 1}).fit(X, y)


def test_training_rows_do_not_depend_on_the_validation_size():
    """MAC with a validation set and its two-step baseline without one learn from the same
    points; the validation rows are apart from them."""
    from dask_hashcodes.hashing.mac import _draw_rows

    draws = {n_val: _draw_rows(np.random.default_rng(3), 10_000, 500, n_val) for n_val in (0, 100, 2000)}
    for train, val in draws.values():
        np.testing.assert_array_equal(train, draws[0][0])
        assert len(np.unique(val)) == len(val) and not np.isin(val, train).any()
    assert len(draws[2000][1]) == 2000


@pytest.fixture(scope="module")
def mac_report(fmnist_small, cluster):
    """The MAC paper's comparison, reduced: 1500 labeled training points, 16 bits, linear h,
    the first 6 steps of the penalty schedule, label ground truth on 1000 test queries of the
    first 20000 rows (the whole set, 5000 points, 16-48 bits and the whole schedule:
    benchmarks/results/mac/)."""
    from dask_hashcodes import workflows
    from dask_hashcodes.storage.datasets import open_dataset

    ds = open_dataset(fmnist_small)
    with Client(cluster):
        report = workflows.evaluate(
            ds,
            methods=["ksh", "quad", "cut", "macquad", "maccut"],
            bits=[16],
            queries=1000,
            seed=0,
            ks=[1000],
            # MACquad from mu_1 = 1 (the paper's 0.01 only adds iterations whose Z-step changes
            # nothing here: its first change comes at mu ~ 2)
            # C fixed at the value the validation rows choose at every length and seed of the
            # benchmarks: the choice itself runs in the one- and two-worker test above
            params={
                "n_labeled": 1500,
                "mac": {"svm_c": 1.0},
                "macquad": {"mu_start": 1.0, "max_iter": 6},
                "maccut": {"max_iter": 6},
            },
        )
    return {r["method"]: r for r in report["results"]}


@pytest.mark.parametrize("two_step", ["cut", "quad"])
def test_mac_keeps_an_iterate_no_worse_on_validation_than_its_two_step_start(mac_report, two_step):
    """MACcut (MACquad) starts from cut's (quad's) codes and hash function; the iterate it
    keeps has a validation precision no lower than the start's and a test map no lower
    (paper Figs. 2-3, Sec. 3.1)."""
    start, mac = mac_report[two_step], mac_report["mac" + two_step]
    path = mac["training"]["mac_path"]
    assert path[0]["loss_h"] == start["training"]["loss"]  # the same start, taken from the two-step fit
    assert mac["training"]["start_reused"] and not start["training"]["start_reused"]
    assert mac["training"]["svm_c"] == start["training"]["svm_c"] == 1.0
    assert mac["training"]["validation_precision"] >= start["training"]["validation_precision"]
    assert mac["metrics"]["map"] >= start["metrics"]["map"] - 0.005
    refits = [e for e in path[1:] if "h_seconds" in e]
    assert refits and all(e["loss_h"] == e["loss_h_refit"] for e in refits)  # the paper's h-step: the refit


def test_supervised_codes_beat_itq_by_far(mac_report, fmnist_small_itq_map):
    """The supervised premise (paper Fig. 5): with labels, KSH and MACcut codes rank same-class
    points far better than ITQ's."""
    itq = fmnist_small_itq_map(16)
    assert mac_report["ksh"]["metrics"]["map"] > itq + 0.1
    assert mac_report["maccut"]["metrics"]["map"] > itq + 0.1


def test_ksh_bit_reproduces_a_separable_labelling_exactly():
    """Two classes separated in the kernel features: one KSH bit can make b b^T equal S on
    every pair, so its score b^T (r S) b reaches the maximum l^2 and the bit splits the classes."""
    from dask_hashcodes.kernels.ksh import train_ksh
    from dask_hashcodes.kernels.label_similarity import pair_labels

    rng = np.random.default_rng(4)
    labels = np.repeat([0, 1], 40)
    K = rng.standard_normal((80, 6)) * 0.1
    K[:, 0] += np.where(labels == 0, 1.0, -1.0)
    K -= K.mean(axis=0)
    A, scores = train_ksh(K, pair_labels(labels), 1, max_iter=50)
    bits = np.where(K @ A[:, 0] >= 0, 1, -1)
    assert scores[0] == pytest.approx(80**2)
    assert len(set(bits[labels == 0])) == 1 and len(set(bits[labels == 1])) == 1 and bits[0] != bits[-1]


def test_knn_affinities_need_no_labels(fmnist_rows):
    """Unsupervised mode: affinities from exact Euclidean neighbours; the fit runs without y,
    and on 300 held-out rows its codes find a row's true neighbours among the other held-out
    rows (precision@10 among 150; measured 0.36) far above chance (10 / 150)."""
    X = fmnist_rows[0][:900]
    model = make_hasher(
        "maccut", 8, affinity="knn", n_labeled=600, n_similar=10, n_dissimilar=50, validation_size=300, max_iter=3
    ).fit(X)
    assert model.training_stats_["n_blocks"] < 600  # blocks grown from neighbours, not single points
    assert model.training_stats_["validation_precision"] > 3 * 10 / 150


def test_a_saved_kernel_model_without_its_feature_scaling_is_refused_in_one_line(tmp_path):
    """A kernel MAC model round-trips through save/load with identical codes; one whose
    arrays lack the standardisation of its RBF features (as saved before it existed) is
    refused with a one-line error naming the missing array, not an AttributeError at encode."""
    from dask_hashcodes.hashing.registry import load_model
    from dask_hashcodes.storage.npz import npz_bytes
    from tests.test_verified_artifacts import rewrite_committed_file

    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 5))
    params = {"affinity": "knn", "hash_function": "kernel", "n_centres": 6, "n_labeled": 30}
    model = make_hasher("maccut", 2, n_similar=3, n_dissimilar=6, validation_size=0, max_iter=2, **params).fit(X)
    model.save(tmp_path / "m")
    np.testing.assert_array_equal(load_model(tmp_path / "m").encode(X), model.encode(X))
    arrays = {k: v for k, v in model._learned_arrays().items() if k != "mean_"}
    (tmp_path / "m" / "arrays.npz").write_bytes(npz_bytes(arrays))
    with pytest.raises(InputError, match=r"arrays.npz differs from its commit record .*; re-train"):
        load_model(tmp_path / "m")
    # even listed in the commit record, the arrays must be the ones a kernel MAC model has
    rewrite_committed_file(tmp_path / "m", "arrays.npz", npz_bytes(arrays))
    with pytest.raises(InputError, match="arrays.npz lacks the array 'mean_'; re-train"):
        load_model(tmp_path / "m")


def test_every_committed_mac_result_is_the_one_its_script_command_makes():
    """benchmarks/run_mac.sh holds the command of every committed MAC comparison: each parses,
    each committed summary has its command, and each records exactly that command."""
    import os
    import subprocess
    from pathlib import Path

    from benchmarks.mac_comparison import build_parser

    repo = Path(__file__).resolve().parents[1]
    printed = subprocess.run(
        ["bash", "benchmarks/run_mac.sh"],
        cwd=repo,
        env={**os.environ, "DRY_RUN": "1"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    commands = {build_parser().parse_args(line.split()).out: line for line in printed}
    assert len(commands) == len(printed)  # one command per result
    results = repo / "benchmarks" / "results" / "mac"
    summaries = [
        *results.glob("*.md"),
        *(p for p in results.glob("settings/*.md") if p.name != "README.md"),
        # the scale runs (README.md and label-blocks.md come from other scripts)
        *results.glob("scale/b32-*.md"),
        *results.glob("scale/knn-*.md"),
    ]
    assert set(commands) == {str(p.with_suffix("").relative_to(repo)) for p in summaries}
    for out, line in commands.items():
        recorded = (repo / f"{out}.md").read_text().splitlines()[2]
        assert recorded == f"- command: `benchmarks/mac_comparison.py {line}`", out


def test_pairs_of_more_points_than_int32_keys_can_hold():
    """Beyond 46341 points, n * N + m overflows int32 (scipy stores the columns as int32):
    the couplings of 50,000 points must still be (A + A^T) / 2 of the listed pairs."""
    from dask_hashcodes.kernels.affinity import bit_coefficients

    n, bits, bit = 50_000, 8, 3
    rng = np.random.default_rng(0)
    rows = np.repeat(np.arange(n), 2)
    # two distinct partners per point, neither the point itself
    offsets = np.stack([rng.integers(1, n // 2, n), rng.integers(n // 2, n, n)], axis=1).ravel()
    cols = (rows + offsets) % n
    y = np.where(rng.random(2 * n) < 0.5, 1, -1)
    Y = sparse.csr_matrix((y.astype(np.int8), (rows, cols)), shape=(n, n))
    Z = rng.choice([-1.0, 1.0], size=(n, bits))
    # KSH: A_nm = 2 (s_nm - b y_nm), s the inner product over the other bits
    others = (Z[rows] * Z[cols]).sum(axis=1) - Z[rows, bit] * Z[cols, bit]
    A = sparse.csr_matrix((2.0 * (others - bits * y), (rows, cols)), shape=(n, n))
    S = bit_coefficients("ksh", Z, Y, bit)
    assert abs(S - (A + A.T) * 0.5).max() == 0
