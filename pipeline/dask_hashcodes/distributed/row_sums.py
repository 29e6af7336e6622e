"""The per-chunk task of the passes that learn a training set's mean and spread (Dask wiring;
the sums are ``kernels.gram.row_sums``).

DisH, SIKH and SGH each start with one pass over the training chunks whose partial
(rows, column sums, sum of squares) are added by ``map_reduce`` with
``kernels.stats.add_partials``. The task rejects NaN, Inf and values too large to square where
the chunk is read, so a bad row fails the pass instead of poisoning the mean.
"""

from __future__ import annotations

from dask_hashcodes.kernels.gram import row_sums
from dask_hashcodes.validation import check_finite_block


def finite_row_sums(block):
    """``row_sums`` of a training chunk, after checking its values are finite and squarable
    (InputError naming the first bad row otherwise)."""
    check_finite_block(block, what="training features")
    return row_sums(block)
