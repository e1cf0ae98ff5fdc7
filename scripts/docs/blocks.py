"""Finds the runnable snippets of the docs: every fenced code block in README.md and
docs/**/*.md whose info string is `sh runnable` or `python runnable` (the words after
the language may come in any order; `bash` counts as `sh`). Writes each block's code to
OUTDIR/NNN.sh or OUTDIR/NNN.py and prints one line per block, tab-separated:
`NNN  language  path:line` (the line of the opening fence, counted from 1).

A fence marked `runnable` in another language, or a fence left open, is an error
(exit 1), reported with its file and line: a snippet meant to run is never skipped
silently.

Usage: python3 blocks.py ROOT OUTDIR
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
LANGUAGES = {"sh": "sh", "bash": "sh", "shell": "sh", "python": "py", "py": "py"}


def documents(root: Path) -> list[Path]:
    found = [root / "README.md"] if (root / "README.md").is_file() else []
    found += sorted(path for path in (root / "docs").rglob("*.md") if path.is_file())
    return found


def blocks_of(path: Path, relative: str) -> tuple[list[tuple[str, int, str]], list[str]]:
    """(language, line, code) of each runnable block, and the errors found."""
    blocks: list[tuple[str, int, str]] = []
    errors: list[str] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening or (opening["fence"][0] == "`" and "`" in opening["info"]):
            index += 1
            continue
        indent, fence, words = opening["indent"], opening["fence"], opening["info"].split()
        start = index
        body: list[str] = []
        index += 1
        while index < len(lines):
            closing = FENCE.match(lines[index])
            if (closing and closing["fence"][0] == fence[0] and len(closing["fence"]) >= len(fence)
                    and not closing["info"].strip()):
                break
            line = lines[index]
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip(" \t"))
            index += 1
        else:
            errors.append(f"{relative}:{start + 1}: a code fence that is never closed")
            break
        index += 1
        if "runnable" not in words[1:]:
            continue
        language = LANGUAGES.get(words[0]) if words else None
        if language is None:
            errors.append(f"{relative}:{start + 1}: `runnable` on a block of {words[0] if words else 'no language'!r}: "
                          "only sh and python blocks can run")
            continue
        blocks.append((language, start + 1, "\n".join(body) + "\n"))
    return blocks, errors


def main() -> int:
    root, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    number = 0
    for path in documents(root):
        relative = path.relative_to(root).as_posix()
        blocks, found_errors = blocks_of(path, relative)
        errors += found_errors
        for language, line, code in blocks:
            number += 1
            name = f"{number:03d}"
            (out / f"{name}.{language}").write_text(code, encoding="utf-8")
            print(f"{name}\t{language}\t{relative}:{line}")
    for error in errors:
        print(f"docs: {error}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
