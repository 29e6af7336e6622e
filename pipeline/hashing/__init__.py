"""Hash-function learners (one module per method family) and the method registry."""

from pipeline.hashing.adsh import ADSH
from pipeline.hashing.anchor_graph import AGH
from pipeline.hashing.base import Hasher
from pipeline.hashing.cosdish import COSDISH
from pipeline.hashing.discrete_graph import DGH
from pipeline.hashing.dish import DisH
from pipeline.hashing.dpsh import DPSH
from pipeline.hashing.kernel import BRE, KLSH, KSH
from pipeline.hashing.linear import ITQ, LSH, PCAH, IsoHash
from pipeline.hashing.mac import MAC
from pipeline.hashing.periodic import SH, SIKH
from pipeline.hashing.quantization import KMH
from pipeline.hashing.registry import (
    HASHERS,
    METHOD_NAMES,
    METHOD_VARIANTS,
    check_params_used,
    load_model,
    make_hasher,
    method_class,
    method_params,
)
from pipeline.hashing.sdh import SDH
from pipeline.hashing.sgh import SGH
from pipeline.hashing.splh import SPLH, USPLH

__all__ = [
    "ADSH",
    "AGH",
    "BRE",
    "COSDISH",
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
