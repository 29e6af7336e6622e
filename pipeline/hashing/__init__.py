"""Hash-function learners (one module per method family) and the method registry."""
from pipeline.errors import InputError
from pipeline.hashing.base import Hasher, load_model
from pipeline.hashing.dish import DisH
from pipeline.hashing.linear import ITQ, LSH, PCAH
from pipeline.hashing.sgh import SGH

HASHERS: dict[str, type[Hasher]] = {cls.method: cls for cls in (LSH, PCAH, ITQ, DisH, SGH)}


# names accepted by the jobs that select a variant of a registered estimator
METHOD_VARIANTS = {"dish-allreduce": ("dish", {"consensus": "allreduce"})}
METHOD_NAMES = (*HASHERS, *METHOD_VARIANTS)


def make_hasher(method: str, n_bits: int, *, random_state: int | None = 0, **params) -> Hasher:
    """Build an estimator by name (``lsh``, ``pcah``, ``itq``, ``dish``, ``dish-allreduce``);
    parameters the estimator does not take are ignored (jobs pass one set for all methods)."""
    if method in METHOD_VARIANTS:
        method, fixed = METHOD_VARIANTS[method]
        params = {**params, **fixed}
    try:
        cls = HASHERS[method]
    except KeyError:
        raise InputError(f"unknown method {method!r}; choose from {', '.join(METHOD_NAMES)}") from None
    params = {k: v for k, v in params.items() if k in cls._param_names() and v is not None}
    if "random_state" in cls._param_names():
        params["random_state"] = random_state
    return cls(n_bits=n_bits, **params)


__all__ = ["DisH", "Hasher", "HASHERS", "METHOD_NAMES", "ITQ", "LSH", "PCAH", "SGH", "load_model", "make_hasher"]
