"""Hash-function learners (one module per method family) and the method registry."""
from pipeline.errors import InputError
from pipeline.hashing.base import Hasher, load_model
from pipeline.hashing.linear import ITQ, LSH, PCAH

HASHERS: dict[str, type[Hasher]] = {cls.method: cls for cls in (LSH, PCAH, ITQ)}


def make_hasher(method: str, n_bits: int, *, random_state: int | None = 0, **params) -> Hasher:
    """Build an estimator by registry name (``lsh``, ``pcah``, ``itq``)."""
    try:
        cls = HASHERS[method]
    except KeyError:
        raise InputError(f"unknown method {method!r}; choose from {', '.join(HASHERS)}") from None
    if "random_state" in cls._param_names():
        params["random_state"] = random_state
    return cls(n_bits=n_bits, **params)


__all__ = ["Hasher", "HASHERS", "ITQ", "LSH", "PCAH", "load_model", "make_hasher"]
