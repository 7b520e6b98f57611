"""Text a learner produced, made safe to store and show: any code points in, valid UTF-8 out.

Learner code can put anything in a string: a lone surrogate, NUL, a megabyte on one line. nbformat
writes notebooks as UTF-8 and refuses a lone surrogate, which left a whole notebook ungraded;
nbconvert's HTML and the CSV report mangle control characters. Every string that comes from a
learner (what a cell printed, an error's name, message and traceback, a verdict's message, the
report's sentence) passes through `printable` where it enters a notebook or the report.
"""

from __future__ import annotations

import re

# Neither UTF-8 (lone surrogates) nor XML (other control characters, U+FFFE, U+FFFF) take these;
# tab, newline, carriage return and escape (ANSI colours, which nbconvert renders) stay.
_UNSAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f\ud800-\udfff\ufffe\uffff]")
CUT = " … [{} more characters cut]"


def printable(value: object, limit: int | None = None) -> str:
    """`value` as text, each unsafe character written as its Python escape (`\\udcff`, `\\x00`),
    and cut after `limit` characters (saying how many were cut)."""
    text = str(value)
    if limit is not None and len(text) > limit:
        text = text[:limit] + CUT.format(len(text) - limit)
    return _UNSAFE.sub(lambda found: found.group().encode("unicode_escape").decode("ascii"), text)
