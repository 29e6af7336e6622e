"""Hash-function learners (one module per method family) and the method registry."""
from pipeline.errors import InputError
from pipeline.hashing.base import Hasher, load_model
from pipeline.hashing.dish import DisH
from pipeline.hashing.linear import ITQ, LSH, PCAH
from pipeline.hashing.sgh import SGH
from pipeline.hashing.splh import SPLH, USPLH

HASHERS: dict[str, type[Hasher]] = {cls.method: cls for cls in (LSH, PCAH, ITQ, DisH, SGH, SPLH, USPLH)}


# names accepted by the jobs that select a variant of a registered estimator
METHOD_VARIANTS = {"dish-allreduce": ("dish", {"consensus": "allreduce"}),
                   "pcah-adjusted": ("splh", {"sequential": False})}
METHOD_NAMES = (*HASHERS, *METHOD_VARIANTS)


def make_hasher(method: str, n_bits: int, *, random_state: int | None = 0, **params) -> Hasher:
    """Build an estimator by name (one of METHOD_NAMES); parameters the estimator does not
    take are ignored (jobs pass one set for all methods). A parameter whose name is a
    method name holds a dict of options for that method only, e.g. ``sgh={"rho_scale": 0.5}``
    next to DisH's own ``rho_scale``."""
    per_method = {k: params.pop(k) for k in list(params) if k in METHOD_NAMES and isinstance(params[k], dict)}
    params = {**params, **per_method.get(method, {})}
    if method in METHOD_VARIANTS:
        method, fixed = METHOD_VARIANTS[method]
        params = {**params, **per_method.get(method, {}), **fixed}
    try:
        cls = HASHERS[method]
    except KeyError:
        raise InputError(f"unknown method {method!r}; choose from {', '.join(METHOD_NAMES)}") from None
    params = {k: v for k, v in params.items() if k in cls._param_names() and v is not None}
    if "random_state" in cls._param_names():
        params["random_state"] = random_state
    return cls(n_bits=n_bits, **params)


__all__ = ["HASHERS", "ITQ", "LSH", "METHOD_NAMES", "PCAH", "SGH", "SPLH", "USPLH", "DisH", "Hasher", "load_model", "make_hasher"]
