"""The one error type for problems users can cause and fix themselves."""


class VoiceCliError(Exception):
    """A user-facing failure: the message says what went wrong and what to do.

    The CLI prints the message and exits with ``exit_code``; it never shows a
    traceback for these.
    """

    exit_code = 1
