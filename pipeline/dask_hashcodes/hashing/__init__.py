"""Hash-function learners (one module per method family) and the method registry."""

from dask_hashcodes.hashing.adsh import ADSH
from dask_hashcodes.hashing.anchor_graph import AGH
from dask_hashcodes.hashing.base import Hasher
from dask_hashcodes.hashing.cosdish import COSDISH
from dask_hashcodes.hashing.discrete_graph import DGH
from dask_hashcodes.hashing.dish import DisH
from dask_hashcodes.hashing.dpsh import DPSH
from dask_hashcodes.hashing.kernel import BRE, KLSH, KSH
from dask_hashcodes.hashing.linear import ITQ, LSH, PCAH, IsoHash
from dask_hashcodes.hashing.mac import MAC
from dask_hashcodes.hashing.periodic import SH, SIKH
from dask_hashcodes.hashing.quantization import KMH
from dask_hashcodes.hashing.registry import (
    BASELINE_METHODS,
    DEMO_METHODS,
    HASHERS,
    METHOD_NAMES,
    METHOD_VARIANTS,
    check_params_used,
    load_model,
    make_hasher,
    method_class,
    method_params,
)
from dask_hashcodes.hashing.sdh import SDH
from dask_hashcodes.hashing.sgh import SGH
from dask_hashcodes.hashing.splh import SPLH, USPLH

__all__ = [
    "ADSH",
    "AGH",
    "BASELINE_METHODS",
    "BRE",
    "COSDISH",
    "DEMO_METHODS",
    "DGH",
    "DPSH",
    "HASHERS",
    "ITQ",
    "IsoHash",
    "KLSH",
    "KMH",
    "KSH",
    "LSH",
    "MAC",
    "METHOD_NAMES",
    "METHOD_VARIANTS",
    "PCAH",
    "SDH",
    "SGH",
    "SH",
    "SIKH",
    "SPLH",
    "USPLH",
    "DisH",
    "Hasher",
    "check_params_used",
    "load_model",
    "make_hasher",
    "method_class",
    "method_params",
]
