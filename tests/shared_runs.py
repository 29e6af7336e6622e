"""Evaluation runs that several quality tests read: each (dataset, protocol, method, bits)
is trained and scored once per session, so that a baseline (LSH, PCAH) which the quality
tests of several methods compare with on the same split and ground truth is not trained
again for each of them. A run does not depend on the other methods of its evaluation (each
is trained with the same seed on the same split), so a shared run gives the numbers that
the test's own evaluation would."""

from __future__ import annotations

import json

from distributed import Client

from dask_hashcodes import workflows
from dask_hashcodes.hashing import method_params
from dask_hashcodes.storage.datasets import open_dataset

# The SGH paper's protocol (its Table, and the DGH paper's): the exact top 2% Euclidean
# neighbours as ground truth, 1000 queries. Precision at 380 (the number of true neighbours
# among fmnist_small's 19000 database rows) and at 1000 (the SGH paper's).
EUCLIDEAN_TOP2 = {"queries": 1000, "seed": 0, "ground_truth": "euclidean", "top_percent": 2.0, "ks": [380, 1000]}

_RUNS: dict = {}


def evaluated(path, cluster, methods, bits, *, params: dict | None = None, **protocol) -> dict:
    """{(method, bits): {"metrics", "ground_truth", ...}} of ``workflows.evaluate`` on the
    dataset at ``path`` (``protocol``: queries, seed, ground truth, ks). The runs not done yet
    in this session are evaluated on ``cluster``; a run is keyed by the parameters its method
    takes from ``params``, so a baseline's run serves tests that give other methods options."""
    protocol_key = json.dumps(protocol, sort_keys=True)

    def key(method, b):
        return str(path), protocol_key, method, b, json.dumps(method_params(method, params), sort_keys=True)

    for b in bits:
        missing = [m for m in methods if key(m, b) not in _RUNS]
        if not missing:
            continue
        own = {m: method_params(m, params) for m in missing}  # each method's own: none goes unused
        with Client(cluster):
            report = workflows.evaluate(open_dataset(path), methods=missing, bits=[b], params=own, **protocol)
        assert [r["method"] for r in report["results"]] == missing  # one row per run
        for row in report["results"]:
            _RUNS[key(row["method"], b)] = {**row, "ground_truth": report["ground_truth"]}
    return {(m, b): _RUNS[key(m, b)] for m in methods for b in bits}
