"""Every relative link of the repository's Markdown resolves to a file or folder in the
repository (and never leaves it): README.md, ARCHITECTURE.md, docs/**, python/README.md,
typescript/README.md, examples/**. Run by scripts/docs/run; exits 1 naming each broken
link with its file and line."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md", "ARCHITECTURE.md", "docs/**/*.md", "python/README.md", "typescript/README.md", "examples/**/*.md"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def broken_links() -> list[str]:
    broken = []
    for pattern in PAGES:
        for page in sorted(ROOT.glob(pattern)):
            fenced = False
            for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
                if line.lstrip().startswith(("```", "~~~")):
                    fenced = not fenced
                if fenced:
                    continue
                for target in LINK.findall(line):
                    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                        continue  # a URL or an anchor in the same page
                    path = (page.parent / target.split("#", 1)[0]).resolve()
                    where = f"{page.relative_to(ROOT)}:{number}"
                    if not path.is_relative_to(ROOT):
                        broken.append(f"{where}: {target} points outside the repository")
                    elif not path.exists():
                        broken.append(f"{where}: {target} does not exist")
    return broken


if __name__ == "__main__":
    found = broken_links()
    for link in found:
        print(f"docs: broken link {link}", file=sys.stderr)
    print(f"docs: links: {'FAILED' if found else 'every relative link resolves'}")
    sys.exit(1 if found else 0)
