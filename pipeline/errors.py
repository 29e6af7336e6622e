"""One exception type for bad user input.

Every InputError message is one line that names the problem and the fix; the CLI prints
it as ``error: <message>`` and exits with status 2, without a traceback.
"""


class InputError(ValueError):
    """Bad input from the user (data, parameters, files, configs)."""

    def __init__(self, message: str):
        # keep messages to one line whatever the caller built
        super().__init__(" ".join(str(message).split()))
