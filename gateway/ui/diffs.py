"""``git diff`` output as unified and split (side-by-side) views, syntax-highlighted by Pygments with CSS
classes only.

``split_diff(text)`` parses ``git diff`` output into files, each with hunks. A hunk has its ``lines`` in
the diff's own order (the unified view: old and new line numbers, kind ``ctx``/``del``/``add``) and its
``rows`` for the split view; a row has a left (old) and a right (new) cell: line number, kind (``ctx``,
``del``, ``add``, ``empty``) and the line as highlighted, escaped HTML. Deleted and added runs inside a
hunk are paired line by line, the way side-by-side viewers show a change. Both views share each line's
highlighted HTML (a line is highlighted once). An added file is shown as its code (``DiffFile.is_new``).
Highlighting is per line with the lexer of the file's name (a line out of its multi-line context may be
coloured slightly off; the text is always exact and escaped).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from markupsafe import Markup, escape
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import get_lexer_for_filename
from pygments.util import ClassNotFound

from gateway.git.diffcut import MARK

HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")
MAX_LINES = 20_000  # diff lines rendered; the rest is counted, not shown
MAX_LINE_CHARS = 2_000


@dataclass
class Cell:
    number: int | None
    kind: str  # ctx | del | add | empty
    html: Markup


@dataclass
class Row:
    left: Cell
    right: Cell


@dataclass
class Line:
    """One line of the unified view: its number on the old side and on the new (None where absent)."""

    old: int | None
    new: int | None
    kind: str  # ctx | del | add
    html: Markup


@dataclass
class Hunk:
    header: str
    rows: list[Row] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)


@dataclass
class DiffFile:
    old_path: str
    new_path: str
    status: str = "modified"  # added | deleted | modified | renamed | binary
    hunks: list[Hunk] = field(default_factory=list)
    added: int = 0
    deleted: int = 0
    note: str = ""  # the cutter's "file diff too large, N bytes, not shown"

    @property
    def path(self) -> str:
        return self.new_path if self.new_path != "/dev/null" else self.old_path

    @property
    def is_new(self) -> bool:
        """An added file with text: both views show it as plain code at full width, not as "+" lines."""
        return self.status == "added" and bool(self.hunks)


@dataclass
class SplitDiff:
    files: list[DiffFile] = field(default_factory=list)
    cut_lines: int = 0  # lines not rendered (MAX_LINES)
    note: str = ""  # the cutter's "diff cut at N bytes; see ..." (gateway/git/diffcut.py)


class LineHighlighter:
    """Pygments per line, one lexer per file name (plain escaping when none fits)."""

    def __init__(self) -> None:
        self.formatter = HtmlFormatter(nowrap=True, classprefix="hl-")
        self.lexers: dict[str, Lexer | None] = {}

    def lexer(self, path: str) -> Lexer | None:
        if path not in self.lexers:
            try:
                self.lexers[path] = get_lexer_for_filename(path, stripnl=False, ensurenl=False)
            except ClassNotFound:
                self.lexers[path] = None
        return self.lexers[path]

    def line(self, path: str, text: str) -> Markup:
        text = text if len(text) <= MAX_LINE_CHARS else text[:MAX_LINE_CHARS] + "…"
        lexer = self.lexer(path)
        if lexer is None or not text:
            return Markup(escape(text))
        return Markup(highlight(text, lexer, self.formatter).rstrip("\n"))


def _path(header: str, prefix: str) -> str:
    value = header[4:].split("\t", 1)[0].strip()
    if value.startswith('"') and value.endswith('"'):
        value = value[1:-1]
    return value[len(prefix) :] if value.startswith(prefix) else value


def _pair(pending_del: list[Cell], pending_add: list[Cell], rows: list[Row]) -> None:
    """Flush a run of deletions and additions as side-by-side rows."""
    empty = Cell(None, "empty", Markup(""))
    for i in range(max(len(pending_del), len(pending_add))):
        left = pending_del[i] if i < len(pending_del) else empty
        right = pending_add[i] if i < len(pending_add) else empty
        rows.append(Row(left, right))
    pending_del.clear()
    pending_add.clear()


def split_diff(text: str, highlighter: LineHighlighter | None = None) -> SplitDiff:
    out = SplitDiff()
    hl = highlighter or LineHighlighter()
    current: DiffFile | None = None
    hunk: Hunk | None = None
    old_no = new_no = 0
    dels: list[Cell] = []
    adds: list[Cell] = []
    shown = 0

    def flush() -> None:
        if hunk is not None:
            _pair(dels, adds, hunk.rows)

    for line in text.splitlines():
        if line.startswith("diff --git "):
            flush()
            hunk = None
            parts = line.split(" b/", 1)
            new = parts[1] if len(parts) == 2 else line[11:]
            old = parts[0][len("diff --git a/") :] if parts[0].startswith("diff --git a/") else new
            current = DiffFile(old_path=old, new_path=new)
            out.files.append(current)
            continue
        if line.startswith(MARK):  # a cutter's marker: no diff line starts so (hunk lines never with '.')
            flush()
            hunk = None
            if current is not None and not current.hunks and "file diff too large" in line:
                current.note, current.status = line[len(MARK) :], "too large"
            else:
                out.note = line[len(MARK) :]
            continue
        if current is None:
            continue
        if hunk is None or line[:1] not in (" ", "+", "-", "\\"):
            if line.startswith("--- "):
                current.old_path = _path(line, "a/")
                if current.old_path == "/dev/null":
                    current.status = "added"
                continue
            if line.startswith("+++ "):
                current.new_path = _path(line, "b/")
                if current.new_path == "/dev/null":
                    current.status = "deleted"
                continue
            if line.startswith("rename from "):
                current.status = "renamed"
                current.old_path = line[len("rename from ") :]
                continue
            if line.startswith("rename to "):
                current.new_path = line[len("rename to ") :]
                continue
            if line.startswith("new file mode"):
                current.status = "added"
                continue
            if line.startswith("deleted file mode"):
                current.status = "deleted"
                continue
            if line.startswith("Binary files"):
                current.status = "binary"
                continue
        match = HUNK_RE.match(line)
        if match:
            flush()
            old_no, new_no = int(match.group(1)), int(match.group(3))
            hunk = Hunk(header=line)
            current.hunks.append(hunk)
            continue
        if hunk is None:
            continue
        if shown >= MAX_LINES:
            out.cut_lines += 1
            continue
        shown += 1
        mark, body = line[:1], line[1:]
        path = current.path
        if mark == "-":
            code = hl.line(path, body)
            dels.append(Cell(old_no, "del", code))
            hunk.lines.append(Line(old_no, None, "del", code))
            old_no += 1
            current.deleted += 1
        elif mark == "+":
            code = hl.line(path, body)
            adds.append(Cell(new_no, "add", code))
            hunk.lines.append(Line(None, new_no, "add", code))
            new_no += 1
            current.added += 1
        elif mark == "\\":
            continue  # "\ No newline at end of file"
        else:
            _pair(dels, adds, hunk.rows)
            code = hl.line(path, body)
            hunk.rows.append(Row(Cell(old_no, "ctx", code), Cell(new_no, "ctx", code)))
            hunk.lines.append(Line(old_no, new_no, "ctx", code))
            old_no += 1
            new_no += 1
    flush()
    return out
