"""Every registered hasher honours the scikit-learn estimator contract.

``check_estimator``'s whole suite runs on each method with parameters that fit its tiny
inputs (a few dozen rows): PCA-based methods cannot have more bits than features, SGH
needs fewer kernel bases than rows, SPLH fewer labeled points, USPLH smaller regions, MAC fewer training points and pairs
(with knn affinities: the checks' labels may leave a class too small for label pairs).
No check is expected to fail.

The whole matrix (about a thousand checks) runs on dask's synchronous scheduler in this
process: it tests what the estimators promise through the scikit-learn API, wherever their
graphs run, and a check's fits there cost milliseconds instead of a cluster's round trips.
The checks where running on a cluster can break the promise run again on the session's
multi-process cluster, for every estimator (DisH's ADMM nodes pinned to its workers): a
fitted estimator pickles and encodes as before, a second fit gives the same codes, and fit,
transform and rows taken in subsets give the same codes as all at once.
"""

import re

import numpy as np
import pytest
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import estimator_checks_generator, parametrize_with_checks

from dask_hashcodes import (
    ADSH,
    AGH,
    BRE,
    COSDISH,
    DGH,
    DPSH,
    ITQ,
    KLSH,
    KMH,
    KSH,
    LSH,
    MAC,
    PCAH,
    SDH,
    SGH,
    SH,
    SIKH,
    SPLH,
    USPLH,
    DisH,
    InputError,
    IsoHash,
    make_hasher,
)
from dask_hashcodes.hashing import HASHERS

SMALL = [
    LSH(n_bits=3),
    PCAH(n_bits=1),
    ITQ(n_bits=1, n_iter=3),
    IsoHash(n_bits=1),
    SH(n_bits=3),
    SIKH(n_bits=3),
    KLSH(n_bits=3, n_anchors=5, subset_size=2),
    BRE(n_bits=3, train_size=6, points_per_bit=2),
    AGH(n_bits=2, n_anchors=4, kmeans_iter=2),
    AGH(n_bits=2, n_anchors=4, kmeans_iter=2, layers=2),
    DGH(n_bits=2, n_anchors=4, kmeans_iter=2),
    KMH(n_bits=1, bits_per_subspace=1, n_iter=2),
    DisH(n_bits=1, nodes=2, max_iter=3),
    DisH(n_bits=1, consensus="allreduce", max_iter=3),
    SGH(n_bits=3, n_bases=5),
    SPLH(n_bits=3, n_labeled=5),
    USPLH(n_bits=1, region_size=3),
    KSH(n_bits=2, n_labeled=8, n_anchors=3, max_iter=5),
    MAC(n_bits=1, affinity="knn", n_labeled=8, n_similar=2, n_dissimilar=3, validation_size=0, max_iter=2),
    MAC(
        n_bits=1,
        affinity="knn",
        hash_function="kernel",
        n_centres=4,
        n_labeled=8,
        n_similar=2,
        n_dissimilar=3,
        validation_size=0,
        max_iter=2,
    ),
    ADSH(
        n_bits=2,
        outer_iter=1,
        inner_iter=1,
        n_samples=5,
        batch_size=4,
        network={"name": "mlp", "hidden": [4]},
        threads=1,
        validation_size=0,
    ),
    SDH(n_bits=2, n_labeled=8, n_anchors=3, max_iter=2),
    COSDISH(n_bits=2, n_labeled=8, max_iter=2),
    DPSH(n_bits=2, epochs=1, n_labeled=6, batch_size=4, network={"name": "mlp", "hidden": [4]}),
]


def test_every_registered_method_is_checked():
    assert {type(e) for e in SMALL} == set(HASHERS.values())


@parametrize_with_checks(SMALL)
def test_scikit_learn_contract(estimator, check):
    import dask

    with dask.config.set(scheduler="synchronous"):
        check(estimator)


# the checks whose promise a cluster can break: state that must pickle, fits that must not
# depend on where their tasks ran, codes that must not depend on how the rows are split
ON_A_CLUSTER = {
    "check_estimators_pickle",
    "check_fit_idempotent",
    "check_transformer_general",
    "check_methods_subset_invariance",
}


def _check_name(check) -> str:
    return getattr(check, "func", check).__name__


CLUSTER_CHECKS = [
    (estimator, check)
    for one in SMALL
    for estimator, check in estimator_checks_generator(one, legacy=True, mark="xfail")
    if _check_name(check) in ON_A_CLUSTER and not getattr(check, "keywords", {})  # not the memmap variants
]


@pytest.fixture(scope="module")
def contract_client(cluster):
    """One client for the module's cluster checks: a client per check (the ``client``
    fixture) costs more to open and close than most checks take to run."""
    from distributed import Client

    with Client(cluster) as c:
        yield c


def test_every_estimator_has_its_cluster_checks():
    assert len(CLUSTER_CHECKS) == len(SMALL) * len(ON_A_CLUSTER)


@pytest.mark.parametrize(
    "estimator, check",
    CLUSTER_CHECKS,
    ids=[re.sub(r"\s+", "", repr(e)) + "-" + _check_name(c) for e, c in CLUSTER_CHECKS],
)
def test_scikit_learn_contract_on_the_cluster(estimator, check, contract_client):
    check(estimator)


def test_composes_with_a_scikit_learn_pipeline():
    X = np.random.default_rng(0).standard_normal((400, 40))
    bits = make_pipeline(StandardScaler(), ITQ(n_bits=32)).fit(X).transform(X)
    assert bits.shape == (400, 32) and bits.dtype == np.uint8 and set(np.unique(bits)) == {0, 1}
    model = ITQ(n_bits=32).fit(StandardScaler().fit_transform(X))
    assert np.array_equal(np.packbits(bits, axis=1, bitorder="little"), model.encode(StandardScaler().fit_transform(X)))


def test_a_failed_refit_leaves_the_fitted_state_intact():
    rng = np.random.default_rng(1)
    model = ITQ(n_bits=8, n_iter=5).fit(rng.standard_normal((300, 20)))
    before = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in vars(model).items()}
    bad = rng.standard_normal((300, 4))  # 4 features < 8 bits: refused
    with pytest.raises(InputError, match="n_features = 4"):
        model.fit(bad)
    bad = rng.standard_normal((300, 20))
    bad[7, 3] = np.nan  # refused inside the fit
    with pytest.raises(InputError, match="row 7"):
        model.fit(bad)
    assert vars(model).keys() == before.keys()
    for k, v in before.items():
        assert np.array_equal(getattr(model, k), v) if isinstance(v, np.ndarray) else getattr(model, k) == v


def test_make_hasher_refuses_unknown_parameters_naming_the_valid_ones():
    with pytest.raises(InputError, match="no parameter n_itr; its parameters: n_iter, random_state"):
        make_hasher("itq", 8, n_itr=3)
    assert make_hasher("itq", 8, n_iter=3).n_iter == 3
    assert make_hasher("dish-allreduce", 8).consensus == "allreduce"


def test_a_model_from_a_newer_major_version_is_refused(tmp_path):
    import json

    from dask_hashcodes import load_model
    from tests.test_verified_artifacts import rewrite_committed_file

    X = np.random.default_rng(2).standard_normal((200, 12))
    ITQ(n_bits=8, n_iter=2).fit(X).save(tmp_path / "m")
    assert load_model(tmp_path / "m").n_bits == 8
    meta_file = tmp_path / "m" / "model.json"
    meta = json.loads(meta_file.read_text())
    for newer in ({"library_version": "7.0.0"}, {"schema": "dhash.model/2"}):
        # as a newer dhash writes it: its commit record lists these bytes
        rewrite_committed_file(tmp_path / "m", "model.json", json.dumps({**meta, **newer}).encode())
        with pytest.raises(InputError, match=r"newer than this dhash .*upgrade \(pip install -U dask-hashcodes\)"):
            load_model(tmp_path / "m")


@pytest.mark.parametrize(
    "estimator, message",
    [
        (ITQ(n_iter=-1), "The 'n_iter' parameter of ITQ must be an int in the range [0, inf). Got -1 instead."),
        (ITQ(n_iter=2.5), "The 'n_iter' parameter of ITQ must be an int in the range [0, inf). Got 2.5 instead."),
        (ITQ(n_iter=True), "The 'n_iter' parameter of ITQ must be an int in the range [0, inf). Got True instead."),
        (USPLH(decay=0.0), "The 'decay' parameter of USPLH must be a float in the range (0, 1]. Got 0.0 instead."),
        (SIKH(bandwidth=float("nan")), "must be a float in the range (0, inf) or None. Got nan instead."),
        (
            DisH(init="zeros"),
            "The 'init' parameter of DisH must be a str among {'pca', 'random'}. Got 'zeros' instead.",
        ),
        (DisH(topology=3), "must be a str among {'complete', 'random', 'ring', 'star'} or a list. Got 3 instead."),
        (SGH(refine="yes"), "The 'refine' parameter of SGH must be a bool. Got 'yes' instead."),
        (ADSH(network=3), "The 'network' parameter of ADSH must be a str, a dict or None. Got 3 instead."),
    ],
)
def test_a_bad_parameter_value_is_one_line_naming_it_and_what_it_accepts(estimator, message):
    """The project's own constraints (dask_hashcodes.hashing.constraints) refuse a value before
    any work, as an InputError (and a TypeError, scikit-learn's contract) of one line."""
    X = np.random.default_rng(0).standard_normal((50, 10))
    with pytest.raises(InputError) as refused:
        estimator.fit(X)
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert isinstance(refused.value, TypeError)


def test_accepted_values_pass_the_constraints():
    for estimator in (
        ITQ(n_iter=np.int64(3)),
        USPLH(decay=1),
        SIKH(bandwidth=np.float32(2.0)),
        DisH(topology=[[0, 1]]),
    ):
        estimator._validate_params()
    ADSH(network="a-registered-name")._validate_params()  # names a library user registers are not listed


def test_no_module_imports_scikit_learns_private_parameter_validation():
    """Parameter types are the project's own (dask_hashcodes.hashing.constraints); the
    private sklearn.utils._param_validation may change in any scikit-learn release."""
    import ast
    from pathlib import Path

    import dask_hashcodes

    found = []
    for path in sorted(Path(dask_hashcodes.__file__).resolve().parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names] if isinstance(node, ast.Import)
                else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            )  # fmt: skip
            found += [f"{path.name}: {n}" for n in names if "_param_validation" in n]
    assert found == []
