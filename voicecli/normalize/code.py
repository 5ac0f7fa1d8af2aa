"""Code in LLM text: fenced blocks and inline spans said as "some code" (or a short
name), skipped, or read verbatim behind protection markers no later rule touches."""

from __future__ import annotations

import re
from collections.abc import Callable

from voicecli.config import CodeReading

# Protected spans (code read verbatim) hide behind private-use characters, which no rule
# below matches and \w does not count as content.
PROTECT_OPEN, PROTECT_CLOSE = "\ue000", "\ue001"

PROTECTED = re.compile(f"{PROTECT_OPEN}(.){PROTECT_CLOSE}", re.S)

# Marks a line that stands for a code block, so the prose before it gets a full stop.
BLOCK = "\ue002"

_LANGUAGES = {
    "python": "Python",
    "py": "Python",
    "javascript": "JavaScript",
    "js": "JavaScript",
    "typescript": "TypeScript",
    "ts": "TypeScript",
    "bash": "shell",
    "sh": "shell",
    "shell": "shell",
    "zsh": "shell",
    "console": "shell",
    "powershell": "PowerShell",
    "json": "JSON",
    "yaml": "YAML",
    "yml": "YAML",
    "toml": "TOML",
    "rust": "Rust",
    "rs": "Rust",
    "go": "Go",
    "c": "C",
    "cpp": "C++",
    "c++": "C++",
    "java": "Java",
    "kotlin": "Kotlin",
    "swift": "Swift",
    "ruby": "Ruby",
    "php": "PHP",
    "sql": "SQL",
    "html": "HTML",
    "css": "CSS",
    "xml": "XML",
    "dockerfile": "Dockerfile",
    "markdown": "markdown",
    "md": "markdown",
    "csharp": "C sharp",
    "cs": "C sharp",
}

_WORDLIKE_CODE = re.compile(r"[\w.\-/@+#:]{1,32}(?:\(\))?(?: [\w.\-/@+#:]{1,32}){0,2}")


def _fenced_code(m: re.Match[str], mode: CodeReading, protect: Callable[[str], str]) -> str:
    body = m.group("body").strip("\n")
    if not body.strip() or mode == CodeReading.SKIP:
        return "\n"
    if mode == CodeReading.READ:
        return f"\n{BLOCK}{protect(body)}\n"
    info = m.group("info").strip().split(maxsplit=1)
    language = _LANGUAGES.get(info[0].lower().lstrip("{.").rstrip("}")) if info else None
    said = f"Here is some {language} code." if language else "Here is some code."
    return f"\n{BLOCK}{said}\n"


def _inline_code(content: str, mode: CodeReading, protect: Callable[[str], str]) -> str:
    content = content.strip()
    if mode == CodeReading.SKIP or not content:
        return ""
    if mode == CodeReading.READ:
        return protect(content)
    if _WORDLIKE_CODE.fullmatch(content):
        name = content.removesuffix("()")
        # snake_case reads as words; a lone "_" would otherwise be dropped as markup later
        return re.sub(r"(?<=\w)_+(?=\w)", " ", name).strip("_") or "code"
    return "code"


_FENCE = re.compile(
    r"^[ \t]{0,3}(?P<marker>`{3,}|~{3,})(?P<info>[^\n]*)\n?(?P<body>.*?)"
    r"(?:^[ \t]{0,3}(?P=marker)[`~]*[ \t]*$|\Z)",
    re.S | re.M,
)

_INLINE_CODE = re.compile(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)


def code_to_text(text: str, mode: CodeReading, protected: list[str]) -> str:
    """Fenced blocks, then inline spans; verbatim code goes into ``protected``, and a
    marker stands for it until ``restore_code``."""

    def protect(raw: str) -> str:
        protected.append(raw)
        return f"{PROTECT_OPEN}{chr(0xE100 + len(protected) - 1)}{PROTECT_CLOSE}"

    text = _FENCE.sub(lambda m: _fenced_code(m, mode, protect), text)
    return _INLINE_CODE.sub(lambda m: _inline_code(m.group(2), mode, protect), text)


def restore_code(text: str, protected: list[str]) -> str:
    return PROTECTED.sub(lambda m: protected[ord(m.group(1)) - 0xE100], text)
