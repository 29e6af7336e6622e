"""The public API: ``dask_hashcodes.__all__`` names every estimator, the handles and their open
functions, the Index objects, the workflows, the cluster helpers and the error; each name
resolves; importing the numpy kernels pulls in no Dask."""

from __future__ import annotations

import subprocess
import sys

import numpy

import dask_hashcodes


def test_all_lists_the_estimators_handles_indexes_workflows_and_helpers():
    import dask_hashcodes.hashing as hashing

    estimators = {
        name
        for name in hashing.__all__
        if isinstance(getattr(hashing, name), type) and issubclass(getattr(hashing, name), hashing.Hasher)
    } - {"Hasher"}
    assert estimators and estimators <= set(dask_hashcodes.__all__), sorted(estimators - set(dask_hashcodes.__all__))
    expected = {
        # handles and how to open them
        *("Dataset", "Split", "Model", "Codes", "StoredTables"),
        *("open_dataset", "load_model", "open_codes", "open_index"),
        # Index objects
        *("Index", "FlatIndex", "MIHIndex", "IVFIndex", "MultiIndex", "Rerank", "Queries"),
        # workflows, storage, cluster, errors
        *("search", "evaluate", "encode", "train", "index", "split", "synth", "ingest", "groundtruth", "load_dataset"),
        *("Storage", "connect", "disconnect", "InputError"),
    }
    assert expected <= set(dask_hashcodes.__all__), sorted(expected - set(dask_hashcodes.__all__))
    assert len(dask_hashcodes.__all__) == len(set(dask_hashcodes.__all__))
    for name in dask_hashcodes.__all__:
        assert getattr(dask_hashcodes, name) is not None, name
    assert dask_hashcodes.Model is hashing.Hasher


def test_dhash_search_is_the_workflow_function_and_the_index_objects_have_their_own_package():
    import dask_hashcodes.indexes.index
    from dask_hashcodes import workflows

    assert dask_hashcodes.search is workflows.search and "dask_hashcodes.search" not in sys.modules
    assert isinstance(dask_hashcodes.FlatIndex(numpy.zeros((3, 4), "uint8")), dask_hashcodes.Index)
    assert workflows.search.__name__ == "search"


def test_workflow_parameters_are_plain_names_and_handles_are_not_tuples():
    """A workflow's parameters read as the user writes them (``dataset=``, ``split=``): no
    trailing underscore forced by a function of the same name; the handles are objects with
    named fields, not tuples to unpack."""
    import inspect

    from dask_hashcodes import workflows

    for name in workflows.__all__:
        function = getattr(workflows, name)
        if inspect.isfunction(function):
            odd = [p for p in inspect.signature(function).parameters if p.endswith("_")]
            assert odd == [], f"workflows.{name} takes {odd}"
    assert "dataset" not in dask_hashcodes.__all__  # the parameter's name, not a function
    for handle in (dask_hashcodes.Codes, dask_hashcodes.Dataset):
        assert not hasattr(handle, "__iter__") and not hasattr(handle, "__getitem__"), handle


def test_importing_the_kernels_or_the_package_pulls_in_no_dask():
    code = (
        "import sys, dask_hashcodes, dask_hashcodes.kernels, dask_hashcodes.kernels.hamming\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed'))\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
