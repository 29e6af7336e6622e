"""The method options of ``train``, ``evaluate`` and ``demo``, generated from the estimators.

Nothing about a method parameter is written here: every parameter of a registered estimator
becomes an ``Option`` of the flag ``--{method}-{parameter}``, the registry's ``SHORT_FLAGS``
add the shorter names earlier releases gave some parameters, and each option's value type,
help and default are read from the estimator (its ``_parameter_constraints``, the Parameters
section of its docstring and ``get_params()``).
"""

from __future__ import annotations

import inspect

from dask_hashcodes.cli.option_types import NameOrPairs, Number, Option, boolean, positive_int_list, show_value, text
from dask_hashcodes.hashing.constraints import BOOLEAN, Interval, Options, parameter_docs
from dask_hashcodes.hashing.registry import HASHERS, METHOD_VARIANTS, SHORT_FLAGS

# the commands that train methods, and so take their options
METHOD_COMMANDS = ("train", "evaluate", "demo")

# make_hasher's own arguments, set by these flags of the workflows (not method parameters)
ARGUMENT_FLAGS = {"n_bits": "bits", "random_state": "seed"}
# parameters no flag sets, and why
NOT_FLAGS = {
    "labeled_rows": "row indices are an argument of the library's API; the jobs draw the labeled rows with the seed",
}


def _value_type(cls, param: str) -> tuple:
    """(type, choices) of an estimator parameter, from its ``_parameter_constraints``. Of a
    parameter that also takes a name outside its Options (a network a library user
    registered) or a dict (a network spec), the command line offers the Options' names."""
    constraints = [c for c in cls._parameter_constraints[param] if c is not None]
    numbers = [c for c in constraints if isinstance(c, Interval)]
    names = [tuple(sorted(c.options)) for c in constraints if isinstance(c, Options)]
    if len(numbers) == 1:
        return Number.of(numbers[0]), None
    if names and list in constraints:
        return NameOrPairs(names[0]), None
    if names:
        return text, names[0]
    if BOOLEAN in constraints:
        return boolean, None
    if tuple in constraints or list in constraints:
        return positive_int_list, None
    raise TypeError(f"{cls.__name__}.{param}: no option type for the constraints {constraints}")


def variants(method: str, param: str | None = None) -> list[str]:
    """The method names that reach ``method``'s ``param``: its own and its variants' that do not fix it."""
    return [method] + [v for v, (base, fixed) in METHOD_VARIANTS.items() if base == method and param not in fixed]


def method_flag(method: str, param: str) -> str:
    """The flag name of ``method``'s parameter ``param``: ``{method}-{param}``, hyphenated."""
    return f"{method}-{param.replace('_', '-')}"


def flag_params(cls) -> list[str]:
    """The parameters of an estimator class that have flags, in its signature's order."""
    names = list(inspect.signature(cls.__init__).parameters)[1:]  # after self
    return [p for p in names if p not in ARGUMENT_FLAGS and p not in NOT_FLAGS]


def parameter_help(cls, param: str) -> str:
    """What ``param`` of estimator ``cls`` means: its entry in the class docstring's
    Parameters section (a missing entry is an error: the docstring is the only description)."""
    try:
        return parameter_docs(cls)[param].description
    except KeyError:
        raise LookupError(f"{cls.__name__}'s docstring has no Parameters entry for {param}; add one") from None


def _group(method: str) -> str:
    names = variants(method)
    return f"{HASHERS[method].__name__} (method{'s' if len(names) > 1 else ''} {', '.join(names)})"


def _method_option(name: str, methods: tuple, param: str, help_: str, group: str, short_for=()) -> Option:
    kinds = [_value_type(HASHERS[m], param) for m in methods]
    type_, choices = kinds[0]
    for other in kinds[1:]:
        if isinstance(type_, Number) and isinstance(other[0], Number):
            type_ = type_.narrowed(other[0])
        elif other != kinds[0]:
            raise TypeError(f"flag --{name}: {param} has different types in {', '.join(methods)}; drop the flag")
    # a parameter the evaluation sets itself is a training option only
    evaluated = any(param in HASHERS[m].evaluation_sets for m in methods)
    return Option(
        name,
        ("train",) if evaluated else METHOD_COMMANDS,
        help_,
        type=type_,
        choices=choices,
        group=group,
        param=param,
        methods=methods,
        estimator_defaults={m: HASHERS[m]().get_params()[param] for m in methods},
        metavar="{true,false}" if type_ is boolean else None,
        short_for=short_for,
    )


def _method_options() -> tuple[Option, ...]:
    """Every estimator parameter's --{method}-{param} option, then the short flags."""
    options = [
        _method_option(
            method_flag(method, param),
            (method,),
            param,
            f"{parameter_help(cls, param)} (default {show_value(cls().get_params()[param])})",
            _group(method),
        )
        for method, cls in HASHERS.items()
        for param in flag_params(cls)
    ]
    for name, (methods, param) in SHORT_FLAGS.items():
        targets = tuple(f"--{method_flag(m, param)}" for m in methods)
        help_ = f"short for {targets[0]}"
        if len(targets) > 1:
            help_ = f"short for {', '.join(targets[:-1])} and {targets[-1]} (a method's own flag wins)"
        group = _group(methods[0]) if len(methods) == 1 else "options of several methods"
        options.append(_method_option(name, methods, param, help_, group, targets))
    return tuple(options)


METHOD_OPTIONS: tuple[Option, ...] = _method_options()
