"""One exception type for bad user input.

Every InputError message is one line that names the problem and the fix; the CLI prints
it as ``error: <message>`` and exits with status 2, without a traceback.

Messages speak the library's language: a parameter is named as Python spells it, in
backticks, alone or with the value that fixes the problem (`` `overwrite=True` ``,
`` `top_k=K` ``, `` `rerank='exact'` ``, `` `storage_options` ``). ``PARAMETER`` finds these
marks, so a front end with its own spelling shows that instead: the command line turns
`` `overwrite=True` `` into ``--overwrite`` and `` `top_k=K` `` into ``--top-k K``
(dask_hashcodes.cli.commands.cli_message). A library message never names a command-line flag.
"""

import re

# `name` or `name=value`: a Python identifier in lower case, a value without spaces or backticks
PARAMETER = re.compile(r"`([a-z][a-z0-9_]*)(?:=([^`\s]+))?`")


class InputError(ValueError):
    """Bad input from the user (data, parameters, files, configs)."""

    def __init__(self, message: str):
        # keep messages to one line whatever the caller built
        super().__init__(" ".join(str(message).split()))

    @property
    def parameters(self) -> list[str]:
        """The parameters the message names (its `` `name` `` / `` `name=value` `` marks), in order."""
        return [m.group(1) for m in PARAMETER.finditer(str(self))]


def shape_words(shape) -> str:
    """An array shape in words for a message, never a Python tuple: ``(5,)`` -> "5 values",
    ``(5, 128)`` -> "5 x 128", ``()`` -> "a single value"."""
    shape = tuple(int(s) for s in shape)
    if not shape:
        return "a single value"
    if len(shape) == 1:
        return f"{shape[0]} value" + ("" if shape[0] == 1 else "s")
    return " x ".join(map(str, shape))
