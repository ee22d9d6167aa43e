"""Terminal safety: text that came from data (NVTX names, kernel names, labels, GPU names, file names)
must not drive the user's terminal. Escape sequences hidden in a capture (``\\x1b]0;title\\x07`` retitles
the window, ``\\x1b[2J`` clears it) are shown as visible escapes instead of being executed.

:func:`printable` escapes one string; :func:`guarded` wraps the command's stdout and stderr for the
whole command, so every line printed by any subcommand goes through :func:`printable` (keeping
newlines and tabs, and a carriage return only where it starts a write, as a redrawn progress line does,
or ends a CRLF line). Output that must drive the terminal on purpose writes to ``sys.__stderr__``.
The HTML reports are autoescaped by Jinja2 instead.
"""

from __future__ import annotations

import contextlib
import re
import sys
from typing import Iterator, TextIO

# C0 controls except tab, newline and carriage return; DEL; C1 controls (U+0080-U+009F: CSI is U+009B);
# the bidirectional overrides that make text display in another order than it reads.
_UNSAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


_INNER_CR = re.compile("\r(?!\n)")


def _escape(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: str) -> str:
    """``text`` with control characters (other than tab/newline/CR) replaced by visible ``\\xNN`` escapes."""
    return _UNSAFE.sub(_escape, text)


_LINE_BREAKS = re.compile("[\r\n\x85\u2028\u2029]")


def one_line(text: str) -> str:
    """``text`` as one line: newlines and carriage returns (and the other line breaks) from data shown as
    visible escapes, so a name cannot start a forged row of a table or a second line of an error."""
    return printable(_LINE_BREAKS.sub(lambda m: {"\r": "\\r", "\n": "\\n"}.get(m.group(), _escape(m)), text))


def lines_of(rows: "list[str]") -> "list[str]":
    """Each of ``rows`` (the lines of a table or summary, each built from data) made :func:`one_line`."""
    return [one_line(r) for r in rows]


class _Guard:
    """A text stream that escapes unsafe characters before they reach the wrapped stream."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        if isinstance(text, str):
            safe = printable(text)
            if "\r" in safe[1:]:  # a carriage return inside a line (from data) would overwrite it on screen;
                # one that starts a write (a progress line redrawn) or ends a CRLF line is kept
                safe = safe[:1] + _INNER_CR.sub(lambda m: "\\r", safe[1:])
            self._stream.write(safe)
        else:
            self._stream.write(text)
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):  # isatty, flush, fileno, encoding, buffer ...
        return getattr(self._stream, name)


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """Route sys.stdout and sys.stderr through :func:`printable` while a command runs."""
    old_out, old_err = sys.stdout, sys.stderr
    sys.stdout = _Guard(old_out) if not isinstance(old_out, _Guard) else old_out  # type: ignore[assignment]
    sys.stderr = _Guard(old_err) if not isinstance(old_err, _Guard) else old_err  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = old_out, old_err
