"""Text sources: arguments, and stdin as it arrives (an LLM's reply is the other source:
``voicecli.llm``).

Each source is an iterator of text pieces. It marks REQUEST_SENT and
FIRST_TOKEN on the turn timeline and stops when the cancel token fires.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

from voicecli.cancel import CancelToken
from voicecli.text import Utf8Stream
from voicecli.timeline import FIRST_TOKEN, REQUEST_SENT, Timeline

log = logging.getLogger(__name__)

READ_SIZE = 4096


def text_source(parts: list[str], timeline: Timeline) -> Iterator[str]:
    timeline.mark(REQUEST_SENT)
    text = " ".join(parts)
    if text:
        timeline.mark(FIRST_TOKEN)
        yield text


def stdin_source(fd: int, cancel: CancelToken, timeline: Timeline) -> Iterator[str]:
    """Text from ``fd`` as it arrives (no waiting for EOF or for a full buffer).

    Invalid UTF-8 stops the source with an error naming the byte offset; the
    text before it is still spoken.
    """
    stream = Utf8Stream("Standard input")
    first = True
    timeline.mark(REQUEST_SENT)
    while not cancel.cancelled:
        data = os.read(fd, READ_SIZE)
        final = not data
        text, error = stream.decode(data, final)
        if text:
            if first:
                timeline.mark(FIRST_TOKEN)
                first = False
            yield text
        if error is not None:
            raise error
        if final:
            return
