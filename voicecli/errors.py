"""The one error type for problems users can cause and fix themselves."""


class VoiceCliError(Exception):
    """A user-facing failure: the message says what went wrong and what to do.

    The CLI prints the message and exits with ``exit_code``; it never shows a
    traceback for these.
    """

    exit_code = 1

    def __init__(self, message: str, *, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code
