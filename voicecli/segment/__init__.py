"""Cut a stream of LLM text into speakable units as early as the text allows.

The segmenter decides every boundary from the text alone, looking only a bounded
distance past a candidate boundary. When that lookahead has not arrived yet it waits
instead of guessing, so the output is the same however the stream is chunked.

What settles a candidate boundary:

* ``.`` ``!`` ``?`` ``…`` (after any closing quotes/brackets and whitespace): the first
  character of the next word. A lowercase letter means "same sentence" ("wait... what",
  "etc. and"); anything else ends the sentence. After an initial ("J."), a dotted acronym
  ("U.S.") or a company/street suffix ("Inc.", "St.") the whole next word is needed: only a
  common sentence starter ("The", "It", ...) ends the sentence there. After "No.", "Fig.",
  "Jan." and the like a digit means "same sentence". Titles and Latin abbreviations
  ("Dr.", "e.g.", "vs.") never end a sentence.
* Spaced dots (". . ."): the dots that follow, and then the next word. Three mark words
  left out and never end a sentence; a fourth is a period. "[...]" is never an end. In
  a unit that opens with a list marker ("1.", "a."), the next marker ("2.", "b.") starts
  a new unit before it rather than ending one after it.
* CJK terminators (。！？): the next character (to keep closing brackets with the sentence).
* A newline: the start of the next line (blank line, list item, heading, table row or
  code fence end a unit in chat mode). With ``newline_is_boundary`` a newline ends the unit
  at once.
* With ``fast_first``, the first unit of a reply ends at its first clause mark (``,``
  ``;`` ``:`` a dash) or sentence end once it has ``min_first_words`` words and
  ``min_first_chars`` characters: "Sure," alone. Speech can then start on the reply's
  third token instead of its first sentence's last; the first unit is the one whose
  synthesis the listener waits for in silence.

Peers this borrows from: stream2sentence and LiveKit's splitter (abbreviation, title,
acronym and "sentence starter" lists, a minimum sentence length), pysbd and Open-LLM-VTuber
(cutting the first reply at a clause for a faster first sound), NLTK punkt (using the case
of the next word to decide whether a period after an abbreviation ends the sentence).
"""

from __future__ import annotations

import re

from voicecli.segment.lines import classify_line, fence_closes
from voicecli.segment.rules import (
    CJK_TERMINATORS,
    CLOSERS,
    TERMINATORS,
    ends_sentence,
    inline_item_start,
    spaced_dots_end,
)

# Where a scan has to stop and think. Clause marks only matter for the fast first cut.
_SPECIAL_FIRST = re.compile(r"[.!?…。！？\n,;:—–\-，、；：]")
_SPECIAL_LATER = re.compile(r"[.!?…。！？\n]")
_NON_SPACE = re.compile(r"\S")
_SPACE = re.compile(r"\s")
# Clause boundaries for splitting an overlong sentence; the cut goes at match end.
_CLAUSE_CUT = re.compile(r"[,;:](?=\s)|(?<=\s)-{1,2}(?=\s)|[—–](?=\s)|[，、；：]")
_CJK_RANGE = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_CHAR = re.compile(f"[{_CJK_RANGE}]")
# For counting words: each ideograph counts as one, like a word in spaced scripts.
_WORD = re.compile(f"[{_CJK_RANGE}]|[^\\W{_CJK_RANGE}]+")


class Segmenter:
    """Incremental sentence segmenter for streamed text (see the module docstring).

    ``feed`` returns the units completed by the new text; ``flush`` returns the rest and
    resets the segmenter, so one instance can serve reply after reply.
    """

    def __init__(
        self,
        *,
        fast_first: bool = False,
        min_first_words: int = 1,
        min_first_chars: int = 4,
        min_chars: int = 12,
        max_chars: int = 300,
        newline_is_boundary: bool = False,
    ) -> None:
        if (
            max_chars < 2
            or not 0 <= min_chars <= max_chars
            or not 0 <= min_first_chars <= max_chars
            or min_first_words < 1
        ):
            raise ValueError(
                "need max_chars >= 2, 0 <= min_chars, min_first_chars <= max_chars, "
                "min_first_words >= 1"
            )
        self._fast_first = fast_first
        self._min_first_words = min_first_words
        self._min_first_chars = min_first_chars
        self._min_chars = min_chars
        self._max_chars = max_chars
        self._newline_mode = newline_is_boundary
        self._reset()

    def _reset(self) -> None:
        self._buf = ""
        self._pos = 0  # next index to examine; everything before it is decided
        self._start = 0  # where the current unit begins (may point at whitespace)
        self._seg_begin = -1  # first non-space index of the current unit, once known
        self._before = "\n"  # the character just before buf[0]; "\n" = at a line start
        self._pending_line = True  # pos is a line start not yet classified
        self._line_kind = "text"
        self._fence = ""  # the opening fence marker while inside a fenced code block
        self._first = True  # nothing emitted yet in this reply
        self._out: list[str] = []

    def feed(self, text: str) -> list[str]:
        """Add streamed text; return the units that it completed."""
        if text:
            self._buf += text
            self._scan(final=False)
            self._trim()
        out, self._out = self._out, []
        return out

    def flush(self) -> list[str]:
        """End of input: return everything not yet returned, and reset."""
        self._scan(final=True)
        self._emit(len(self._buf))
        out = self._out
        self._reset()
        return out

    # -- scanning ---------------------------------------------------------------

    def _scan(self, final: bool) -> None:
        buf = self._buf
        n = len(buf)
        while True:
            pos = self._pos
            if self._pending_line:
                if not self._on_line_start(pos, final):
                    return
                self._pending_line = False
                continue
            if self._fence:
                nl = buf.find("\n", pos)
                if nl == -1:
                    self._pos = n
                    return
                self._pos = nl + 1
                self._pending_line = True
                continue

            special = _SPECIAL_FIRST if self._fast_first and self._first else _SPECIAL_LATER
            m = special.search(buf, pos)
            idx = m.start() if m else n
            begin = self._segment_begin()
            if begin != -1 and idx >= begin + self._max_chars and n > begin + self._max_chars:
                if not self._cut_overlong(begin, final):
                    # One giant word: nothing to do until whitespace or the end arrives.
                    self._pos = idx
                    return
                continue
            if m is None:
                self._pos = n
                return
            self._pos = idx
            ch = buf[idx]
            if ch == "\n":
                self._pos = idx + 1
                self._pending_line = True
                if self._newline_mode:
                    self._emit(idx)
                continue
            if ch in TERMINATORS:
                step = self._on_terminator(idx, final)
            elif ch in CJK_TERMINATORS:
                step = self._on_cjk_terminator(idx, final)
            else:
                step = self._on_clause_mark(idx, final)
            if step is None:
                return
            self._pos = step

    def _on_line_start(self, i: int, final: bool) -> bool:
        """Classify the line starting at ``i`` and cut before it if it starts a unit.

        Returns False when the line's beginning has not arrived yet.
        """
        if self._fence:
            closed = fence_closes(self._buf, i, self._fence, final)
            if closed is None:
                return False
            if closed:
                nl = self._buf.find("\n", i)
                end = nl if nl != -1 else len(self._buf)
                self._fence = ""
                self._emit(end)
                self._pos = end
                self._line_kind = "text"
            return True

        classified = classify_line(self._buf, i, final)
        if classified is None:
            return False
        kind, marker = classified
        previous, self._line_kind = self._line_kind, kind
        if kind == "fence":
            self._emit(i)
            self._fence = marker
        elif self._newline_mode:
            pass  # the newline itself already ended the unit
        elif kind == "blank":
            self._emit(i)
        elif kind in ("heading", "item", "table") or previous in ("heading", "table"):
            self._soft_emit(i)
        return True

    def _on_terminator(self, i: int, final: bool) -> int | None:
        """Handle the end of a run of ``.!?…`` at or after ``i``; return where to go on."""
        buf = self._buf
        n = len(buf)
        j = i + 1
        while j < n and buf[j] in TERMINATORS:
            j += 1
        if j < n and buf[j] == "]" and (buf[i - 1] if i else self._before) == "[":
            return j + 1  # "[...]" marks words left out of a quote
        if buf[i:j] == ".":
            dots = spaced_dots_end(buf, j, final)
            if dots is None:
                return None
            if dots > j:
                return self._on_spaced_dots(i, dots, final)
        return self._after_run(i, j, final)

    def _on_spaced_dots(self, i: int, end: int, final: bool) -> int | None:
        """Spaced dots ``buf[i:end]``, as style guides write an ellipsis: three mark words
        left out mid-sentence ("weakened . . . was"); a fourth is a period. Right after a
        word, the first dot is that word's period, and an ellipsis after it opens the
        next sentence ("compounds. . . . The practice") unless nothing but closing marks
        follow it ("less complex. . . .”")."""
        buf = self._buf
        dots = buf.count(".", i, end)
        attached = not (buf[i - 1] if i else self._before).isspace()
        if not attached:
            return end if dots == 3 else self._after_run(i, end, final)
        if dots < 4 or end == len(buf) or buf[end] in CLOSERS:
            return self._after_run(i, end, final)
        decision = self._ends_sentence(i, i + 1, end, final)
        if decision is None:
            return None
        if decision:
            self._soft_emit(i + 1)
            return i + 1  # the ellipsis left is three dots: no boundary in it
        return end

    def _after_run(self, i: int, end: int, final: bool) -> int | None:
        """Decide the terminator run ``buf[i:end]``."""
        buf = self._buf
        n = len(buf)
        j = end
        while j < n and buf[j] in CLOSERS:
            j += 1
        if j >= n:
            if not final:
                return None
            return j
        if not buf[j].isspace():
            return end  # "4.99", "a.b@c.com", "e.g." inner dots: not a boundary
        if buf[i:end] == ".":
            item = inline_item_start(buf, self._start, i)
            if item is not None:
                self._soft_emit(item)  # "1. The first item | 2. The second item"
                return j
        decision = self._ends_sentence(i, end, j, final)
        if decision is None:
            return None
        if decision:
            self._soft_emit(j)
        return j

    def _ends_sentence(self, i: int, end: int, ws: int, final: bool) -> bool | None:
        """``ends_sentence`` for the terminator run ``buf[i:end]`` of the current unit."""
        return ends_sentence(
            self._buf,
            self._start,
            i,
            end,
            ws,
            final=final,
            newline_mode=self._newline_mode,
            at_line_start=self._at_line_start,
        )

    def _on_cjk_terminator(self, i: int, final: bool) -> int | None:
        buf = self._buf
        n = len(buf)
        j = i + 1
        while j < n and (buf[j] in CJK_TERMINATORS or buf[j] in CLOSERS):
            j += 1
        if j >= n and not final:
            return None
        self._soft_emit(j)
        return j

    def _on_clause_mark(self, i: int, final: bool) -> int | None:
        """A comma, semicolon, colon or dash may end the first unit early (fast_first)."""
        buf = self._buf
        ch = buf[i]
        if ch in "，、；：":
            self._first_cut(i + 1)
            return i + 1
        if i + 1 >= len(buf):
            return i + 1 if final else None
        if not buf[i + 1].isspace():
            return i + 1
        if ch == "-":
            # Only a free-standing " - " or " -- " is a dash; "well-known" is a word.
            k = i - 1
            if k >= self._start and buf[k] == "-":
                k -= 1
            if k < self._start or not buf[k].isspace():
                return i + 1
        self._first_cut(i + 1)
        return i + 1

    # -- position ------------------------------------------------------------------

    def _at_line_start(self, i: int) -> bool:
        k = i - 1
        while k >= self._start and self._buf[k] in " \t":
            k -= 1
        if k >= self._start:
            return self._buf[k] == "\n"
        return self._char_before_start() == "\n"

    def _char_before_start(self) -> str:
        return self._buf[self._start - 1] if self._start > 0 else self._before

    # -- cutting ------------------------------------------------------------------

    def _segment_begin(self) -> int:
        if self._seg_begin == -1:
            m = _NON_SPACE.search(self._buf, self._start)
            if m:
                self._seg_begin = m.start()
        return self._seg_begin

    def _piece(self, end: int) -> str:
        return self._buf[self._start : end].strip()

    def _emit(self, end: int) -> None:
        """Cut the current unit at ``end`` unconditionally (hard boundary)."""
        piece = self._piece(end)
        if piece:
            self._out.append(piece)
            self._first = False
        self._start = end
        self._seg_begin = -1

    def _soft_emit(self, end: int) -> None:
        """Cut at ``end`` unless the unit is too short; a short one merges with the next.

        Closing quotes can carry a sentence past max_chars; then the overlong split,
        which runs before the scan goes further, cuts it instead.
        """
        least = self._min_first_chars if self._fast_first and self._first else self._min_chars
        if least <= len(self._piece(end)) <= self._max_chars:
            self._emit(end)

    def _first_cut(self, end: int) -> None:
        if not self._first:
            return
        piece = self._piece(end)
        if (
            len(piece) >= self._min_first_chars
            and len(_WORD.findall(piece)) >= self._min_first_words
        ):
            self._emit(end)

    def _cut_overlong(self, begin: int, final: bool) -> bool:
        """Split a unit longer than max_chars; False if it has to wait for more text."""
        buf = self._buf
        limit = begin + self._max_chars
        cut = -1
        # Only clause marks in the later half count: an early one would leave a remainder
        # that is itself overlong, so a space near the limit gives fewer, evener pieces.
        for m in _CLAUSE_CUT.finditer(buf, begin, limit + 1):
            if m.end() - begin >= self._max_chars // 2 and m.end() <= limit:
                cut = m.end()
        if cut == -1:
            for k in range(limit, begin, -1):
                if buf[k].isspace():
                    cut = k
                    break
        if cut == -1 and _CJK_CHAR.match(buf, limit - 1) and _CJK_CHAR.match(buf, limit):
            cut = limit  # CJK has no spaces; any point between two ideographs will do
        if cut == -1:
            m = _SPACE.search(buf, limit)
            if m is None:
                return False  # at the end of input, flush() releases the rest as is
            cut = m.start()
        self._emit(cut)
        self._pos = max(self._pos, cut)
        return True

    def _trim(self) -> None:
        """Drop text already returned, so the buffer holds only the open unit."""
        start = self._start
        if start == 0:
            return
        self._before = self._buf[start - 1]
        self._buf = self._buf[start:]
        self._pos -= start
        if self._seg_begin != -1:
            self._seg_begin -= start
        self._start = 0
