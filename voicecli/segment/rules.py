"""When a period, question mark or ellipsis ends a sentence: the rules, apart from the
streaming buffer that applies them (``voicecli.segment``)."""

from __future__ import annotations

import re
from collections.abc import Callable

# Decisions are tri-state: True / False, or None when the text needed has not arrived.
Decision = bool | None

# Characters that may end a sentence when followed by whitespace.
TERMINATORS = frozenset(".!?…")
# CJK terminators end a sentence without needing a following space.
CJK_TERMINATORS = frozenset("。！？")
# Kept with the sentence they close: quotes, brackets and markdown emphasis markers.
CLOSERS = frozenset("\"')]}»”’」』）】》*_~`")
# Skipped before looking at the case of the next word.
OPENERS = frozenset("\"'([{«“‘「『（【《*_~")

# Abbreviations that are always followed by more of the same sentence.
_NEVER_FINAL = frozenset(
    """Mr Mrs Ms Mx Dr Prof Rev Hon Messrs Mmes Sgt Capt Cpt Lt Col Gen Cmdr Adm Gov Sen
    Rep Pres Fr MR MRS MS DR PROF e.g i.e E.g I.e eg ie vs Vs cf Cf viz approx Approx
    appr ca incl esp resp w.r.t""".split()
)
# Abbreviations that usually precede a number ("No. 5", "Fig. 2", "Jan. 15").
_BEFORE_NUMBER = frozenset(
    """No no Nos nos Nr nr N° Nº Fig fig Figs figs Vol vol Vols vols p pp Eq eq Eqs Sec Ch
    ch Art Ex Op Tab Ver ver v V Pt Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec""".split()
)
# Abbreviations that may end a sentence but are often followed by a capitalised name.
_SUFFIXES = frozenset(
    """Inc Ltd Co Corp Jr Sr Bros St Mt Ft Ave Rd Blvd Dept Univ Assn Est
    Mon Tue Tues Wed Thu Thur Thurs Fri Sat Sun""".split()
)
# Capitalised words that start sentences far more often than they continue a name.
_STARTERS = frozenset(
    """The This That These Those There Then Than Thus Their They Its It He She We You
    Your Our My His Her But And Or So Yet However Here In On At For If When While After
    Before Also As What Why How Who Where Which Now Today Yes Not Some Many Most All Each
    Every One Let Please Note See Use To With By From Thanks Finally First Second Third
    Next Meanwhile Still Although Because Since Instead Otherwise Overall Once Even Just
    Only Other Another Both Such Unlike Like Well Oh Hi Hello Sure Okay OK Later
    Afterwards Currently Recently Again Is Are Was Were Do Does Did Can Could Would
    Should Will""".split()
)
_MAX_STARTER = max(map(len, _STARTERS))
# Nouns that take a letter as a label ("option A", "vitamin C"): a capital after them is
# no initial, which follows a name or a word such as "by" ("by J. Smith").
_LABEL_NOUNS = frozenset(
    """option options plan vitamin type grade group class section part appendix exhibit
    model version row column block unit level phase stage step item point case room gate
    terminal platform building wing floor zone team answer choice figure table""".split()
)

_INITIAL = re.compile(r"[A-Z]")
# "U.S.", "Ph.D.", "p.m.": often followed by a name ("U.S. Army", "p.m. Eastern").
_ACRONYM = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]|[A-Z][a-z]\.[A-Z]")
# "1." or "a." at the start of a line is a list marker, not the end of a sentence.
_LIST_LABEL = re.compile(r"\d{1,3}|[A-Za-z]|[ivxIVX]{2,4}")
# Bullets that may come before an inline list marker ("• 9. one • 10. two").
BULLETS = frozenset("•◦▪‣⁃·*-–")


def ends_sentence(
    buf: str,
    start: int,
    i: int,
    end: int,
    ws: int,
    *,
    final: bool,
    newline_mode: bool,
    at_line_start: Callable[[int], bool],
) -> Decision:
    """Does the terminator run ``buf[i:end]`` (whitespace from ``ws``) end the sentence
    that began at ``start``? None while the text that decides it has not arrived."""
    n = len(buf)
    k = ws
    newlines = 0
    while k < n and buf[k].isspace():
        newlines += buf[k] == "\n"
        k += 1
    # A paragraph break (or any newline in line mode) ends the unit whatever follows,
    # so there is no need to wait for the next word.
    if newlines >= 2 or (newlines and newline_mode):
        return True
    while k < n and buf[k] in OPENERS:
        k += 1
    if k >= n:
        return True if final else None
    nxt = buf[k]
    lower_next = nxt.islower()

    run_start = i
    while run_start > start and buf[run_start - 1] in TERMINATORS:
        run_start -= 1
    if buf[run_start:end] != ".":
        return not lower_next  # "!", "?", "?!", "...", "…"

    token_start = run_start
    while token_start > start and not buf[token_start - 1].isspace():
        token_start -= 1
    while token_start < run_start and buf[token_start] in OPENERS:
        token_start += 1
    token = buf[token_start:run_start]

    if token in _NEVER_FINAL:
        return False
    if token in _BEFORE_NUMBER and nxt.isdigit():
        return False
    if _LIST_LABEL.fullmatch(token) and at_line_start(token_start):
        return False
    if _INITIAL.fullmatch(token) and _word_before(buf, start, token_start) in _LABEL_NOUNS:
        return not lower_next  # "option A. Option B": a label, not an initial
    if token in _SUFFIXES or _INITIAL.fullmatch(token) or _ACRONYM.fullmatch(token):
        if not nxt.isupper():
            return not lower_next
        word_end = k
        while word_end < n and buf[word_end].isalpha() and word_end - k <= _MAX_STARTER:
            word_end += 1
        if word_end >= n and not final:
            return None
        return buf[k:word_end] in _STARTERS
    return not lower_next


def _word_before(buf: str, start: int, i: int) -> str:
    """The word before ``buf[i]``, lowercased ("option" in "option A.")."""
    k = i
    while k > start and buf[k - 1] in " \t":
        k -= 1
    end = k
    while k > start and buf[k - 1].isalpha():
        k -= 1
    return buf[k:end].lower()


def spaced_dots_end(buf: str, k: int, final: bool) -> int | None:
    """After a period that ends at ``k``: where the spaced dots after it end (". . .", an
    ellipsis as style guides space it), ``k`` if none follow; None until that is known."""
    n = len(buf)
    while True:
        if k + 2 > n:
            return k if final or (k < n and buf[k] != " ") else None
        if buf[k] != " " or buf[k + 1] != ".":
            return k
        k += 2


def inline_item_start(buf: str, start: int, i: int) -> int | None:
    """Where the list item begins whose marker the period at ``i`` closes, when the unit
    that began at ``start`` opens with the marker before it: "1. The first item 2. The
    second", "a. one b. two". The item starts at the marker, or at a bullet before it."""
    token_start = i
    while token_start > start and not buf[token_start - 1].isspace():
        if buf[token_start - 1] in BULLETS:
            break
        token_start -= 1
    token = buf[token_start:i]
    if token.isascii() and token.isdigit() and len(token) <= 3 and int(token) > 1:
        previous = str(int(token) - 1)
    elif len(token) == 1 and "b" <= token <= "z":  # "Option A. Option B." is no list
        previous = chr(ord(token) - 1)
    else:
        return None
    first = start
    while first < token_start and (buf[first].isspace() or buf[first] in BULLETS):
        first += 1
    # The unit must open with that marker: "Step 1. Then step 2." is no list.
    if not buf.startswith(previous + ".", first) or first + len(previous) + 1 >= token_start:
        return None
    cut = token_start
    while cut > start and buf[cut - 1] in " \t":
        cut -= 1
    if cut > start and buf[cut - 1] in BULLETS and (cut - 1 == start or buf[cut - 2].isspace()):
        return cut - 1
    return token_start
