"""Parameter sweeps on a validation split, never on the test queries.

``holdout_dataset`` writes the database rows of the test split (seed of the evaluation) as a
dataset of their own; a sweep then draws its validation queries from those rows with
another seed and scores every configuration with the full evaluation protocol there. The
test queries take no part in choosing parameters.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from dask_hashcodes.storage.datasets import Dataset, open_dataset, write_dataset


def holdout_dataset(ds: Dataset, n_test_queries: int, test_seed: int, out) -> Dataset:
    """The dataset without the test split's query rows (kept at ``out``, reused when present)."""
    out = Path(out)
    split = ds.make_split(n_test_queries, test_seed, name=f"q{n_test_queries}-s{test_seed}")
    if (out / ".dhash-commit.json").exists():
        held = open_dataset(out)
        if held.attrs.get("holdout_of", {}).get("query_sha256") == split.manifest["query_sha256"]:
            return held
    keep = np.setdiff1d(np.arange(ds.n), split.query)
    features = ds.features_dask()[keep]
    labels = None if ds.labels is None else ds.labels[keep]
    blocks = (np.asarray(features.blocks[i].compute()) for i in range(features.numblocks[0]))
    return write_dataset(
        out,
        blocks,
        n=len(keep),
        d=ds.d,
        dtype=ds.dtype,
        source=f"holdout of {ds.source}",
        labels=labels,
        attrs={"holdout_of": {"path": str(ds.path), **split.manifest}},
        overwrite=True,
    )


def grid(**axes) -> list[dict]:
    """Every combination of the given parameter values: grid(a=[1, 2], b=[3]) -> 2 dicts."""
    names = list(axes)
    return [dict(zip(names, values)) for values in itertools.product(*(axes[n] for n in names))]


def sweep(
    holdout: Dataset,
    method: str,
    bits: list[int],
    configs: list[dict],
    *,
    n_queries: int = 1000,
    seed: int = 1,
    progress=None,
    **protocol,
) -> list[dict]:
    """Score ``method`` with each parameter set on validation queries drawn from ``holdout``
    (seed ``seed``): one row per (config, bits) with every metric of the report."""
    from dask_hashcodes import workflows

    rows = []
    for config in configs:
        report = workflows.evaluate(
            holdout,
            methods=[method],
            bits=bits,
            queries=n_queries,
            seed=seed,
            split_name=f"validation-q{n_queries}-s{seed}",
            params={method: config},
            **protocol,
        )
        for r in report["results"]:
            metrics = {k: v for k, v in r["metrics"].items() if isinstance(v, float)}
            rows.append(
                {
                    "method": method,
                    "label": r.get("label", method),  # DisH gives two rows: DisH2 and DisH1
                    "params": config,
                    "n_bits": r["n_bits"],
                    "metrics": metrics,
                    "train_seconds": r["timing"]["train_seconds"],
                }
            )
            if progress is not None:
                progress(rows[-1])
    return rows
