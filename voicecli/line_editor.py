"""A line typed in cbreak mode, key by key: ``chat --listen`` reads the keyboard itself
so that the microphone's live meter can share the terminal line with what is typed."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

ENTER = ("\r", "\n")
BACKSPACE = ("\x7f", "\x08")
CLEAR = "\x15"  # Ctrl-U
EOF_KEY = "\x04"  # Ctrl-D
# Escape sequences (arrows, function keys): no cursor movement in this editor.
ESCAPE = re.compile(r"\x1b(\[[0-9;?]*[ -/]*[@-~]|O.|.)?", re.DOTALL)


@dataclass
class LineEditor:
    text: str = ""
    lines: list[str] = field(default_factory=list)  # submitted, not yet taken
    ended: bool = False  # Ctrl-D on an empty line

    def feed(self, keys: str) -> None:
        for key in ESCAPE.sub("", keys):
            if key in ENTER:
                self.lines.append(self.text)
                self.text = ""
            elif key in BACKSPACE:
                self.text = self.text[:-1]
            elif key == CLEAR:
                self.text = ""
            elif key == EOF_KEY:
                if not self.text:
                    self.ended = True
            elif key.isprintable():
                self.text += key
