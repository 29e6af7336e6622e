"""Hash-function learners (one module per method family) and the method registry."""

from dhash.hashing.adsh import ADSH
from dhash.hashing.anchor_graph import AGH
from dhash.hashing.base import Hasher
from dhash.hashing.cosdish import COSDISH
from dhash.hashing.discrete_graph import DGH
from dhash.hashing.dish import DisH
from dhash.hashing.dpsh import DPSH
from dhash.hashing.kernel import BRE, KLSH, KSH
from dhash.hashing.linear import ITQ, LSH, PCAH, IsoHash
from dhash.hashing.mac import MAC
from dhash.hashing.periodic import SH, SIKH
from dhash.hashing.quantization import KMH
from dhash.hashing.registry import (
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
from dhash.hashing.sdh import SDH
from dhash.hashing.sgh import SGH
from dhash.hashing.splh import SPLH, USPLH

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
