"""Merging two top-k lists of the same queries into one: the step every distributed search
(the linear scan, multi-index hashing, the inverted file, re-ranking, the exact Euclidean
neighbours) repeats in its tree of merges, so every one of them breaks ties the same way.

A list is FAISS's (D, I): D (nq, k) distances, I (nq, k) int64 ids, -1 where a part had
fewer than k rows. Hamming distances are small integers, merged through packed (distance,
id) keys; float distances (squared L2, asymmetric scores) by a sort on (distance, id). Both
put the smaller id first among equal distances and the missing entries last.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from dask_hashcodes.kernels.hamming import merge_topk
from dask_hashcodes.kernels.l2 import merge_l2_topk


def merge_topk_pair(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], k: int):
    """(D, I) of the ``k`` smallest (distance, id) among the two lists ``a`` and ``b``."""
    if np.issubdtype(np.asarray(a[0]).dtype, np.integer):
        return merge_topk([a, b], k)
    return merge_l2_topk(a, b, k)


def topk_merger(k: int):
    """``merge_topk_pair`` with ``k`` bound: the binary combine of a tree of merges."""
    return partial(merge_topk_pair, k=int(k))
