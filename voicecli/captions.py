"""Captions for the audio written to a file (``--captions FILE`` beside ``--output``):
WebVTT or SubRip, chosen by the file's extension, timed to the samples in the file.

Each displayed word takes its time from the synthesizer's word timings, or without them
(a language whose G2P gives none) from its characters, as ``heard`` reads them. Cues
follow the usual caption rules: one line of at most ``MAX_LINE`` characters, never
across two sentences, and cut after a clause mark when that keeps them from being tiny.
"""

from __future__ import annotations

import dataclasses
import html
import re
from collections.abc import Iterable
from pathlib import Path

from voicecli.errors import VoiceCliError
from voicecli.frames import Playback, Sentence
from voicecli.heard import ShownWord, timed_words

FORMATS = {".vtt": "vtt", ".srt": "srt"}
MAX_LINE = 42  # characters per caption line, the common broadcast guideline
MAX_CUE_SECONDS = 6.0
CLAUSE_ENDS = (",", ";", ":", "—")
# Markdown a reply may carry around its words ("**2026**"), and words that are only a
# list's or a heading's markers: a caption shows the words, not the markup.
EMPHASIS = "*_`~"
MARKERS = re.compile(r"[-+*#>|]+")


def caption_format(path: Path) -> str:
    """``vtt`` or ``srt`` for ``path``; a VoiceCliError naming both otherwise."""
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        raise VoiceCliError(f"Captions file {str(path)!r}: name it .vtt (WebVTT) or .srt (SubRip).")
    return kind


class Captions:
    """The cues of every turn written to the audio file so far; the captions file is
    rewritten whole after each turn, so that an interrupted session keeps its cues."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.format = caption_format(path)
        # Each cue's words with their start, in seconds from the file's start, and its end.
        self._cues: list[tuple[list[tuple[float, str]], float]] = []

    def add_turn(self, recording: Playback, sentences: Iterable[Sentence]) -> None:
        by_index = {s.index: s for s in sentences}
        for span in recording.spans:
            sentence = by_index.get(span.sentence)
            if sentence is None:
                continue
            written = recording.position if span.end is None else span.end
            words = [
                dataclasses.replace(w, text=w.text.strip(EMPHASIS))
                for w in timed_words(sentence, span)
                if span.start + w.end <= written and not MARKERS.fullmatch(w.text)
            ]
            words = [w for w in words if w.text]
            rate = recording.sample_rate
            for cue in _cues(words, rate):
                timed = [((span.start + w.start) / rate, w.text) for w in cue]
                self._cues.append((timed, (span.start + cue[-1].end) / rate))
        self.save()

    def save(self) -> None:
        import webvtt
        from webvtt.models import Timestamp

        captions = []
        for words, end in self._cues:
            start = words[0][0]
            if self.format == "vtt":
                # WebVTT cue text is markup: "<" and "&" escaped, and each word after the
                # first marked with its start (a cue timestamp, which players use to
                # light up the word being said). SubRip has neither.
                text = html.escape(words[0][1], quote=False) + "".join(
                    f" <{Timestamp.from_seconds(at)}>{html.escape(word, quote=False)}"
                    for at, word in words[1:]
                )
            else:
                text = " ".join(word for _, word in words)
            captions.append(
                webvtt.Caption(
                    str(Timestamp.from_seconds(start)),
                    str(Timestamp.from_seconds(max(end, start + 0.001))),
                    text,
                )
            )
        try:
            with open(self.path, "w", encoding="utf-8") as f:
                webvtt.WebVTT(captions=captions).write(f, format=self.format)
                f.write("\n")
        except OSError as exc:
            raise VoiceCliError(f"Cannot write the captions to {self.path}: {exc}.") from None


def _cues(words: list[ShownWord], rate: int) -> list[list[ShownWord]]:
    """``words`` (of one sentence) as lines of at most ``MAX_LINE`` characters and
    ``MAX_CUE_SECONDS``, cut after a clause mark once a line is half full."""
    cues: list[list[ShownWord]] = []
    line: list[ShownWord] = []
    for word in words:
        width = sum(len(w.text) + 1 for w in line) + len(word.text)
        long = line and (word.end - line[0].start) / rate > MAX_CUE_SECONDS
        if line and (width > MAX_LINE or long):
            cues.append(line)
            line = []
        line.append(word)
        chars = sum(len(w.text) + 1 for w in line)
        if word.text.endswith(CLAUSE_ENDS) and chars >= MAX_LINE // 2:
            cues.append(line)
            line = []
    if line:
        cues.append(line)
    return cues
