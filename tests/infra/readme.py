"""README.md as the documentation tests read it: its passages, its sample output blocks, and the figures in them
(for tests/infra/test_documented_figures.py and the nag lines in tests/infra/test_eks_nag.py)."""

from __future__ import annotations

import functools
import re

from tests.conftest import ROOT

ELLIPSIS = "..."


@functools.cache
def text() -> str:
    return (ROOT / "README.md").read_text()


def passage(anchor: str) -> str:
    """The paragraph (or list item) holding `anchor`, its lines joined by spaces."""
    for block in re.split(r"\n\s*\n|\n(?=\s*- )", text()):
        joined = " ".join(line.strip() for line in block.splitlines())
        if anchor in joined:
            return joined
    raise AssertionError(f"README has no passage with {anchor!r}")


def figure(pattern: str, where: str) -> str:
    """The one group of `pattern` in `where` (a passage), or a failure naming what was looked for."""
    found = re.search(pattern, where)
    assert found, f"README: {pattern!r} not found in: {where[:300]}"
    return found.group(1)


def number(pattern: str, where: str) -> float:
    return float(figure(pattern, where).replace(",", ""))


def sample_block(after: str) -> list[str]:
    """The lines of the first ``` block after the line holding `after`, without their indent."""
    lines = text().splitlines()
    start = next(i for i, line in enumerate(lines) if after in line)
    opening = next(i for i in range(start, len(lines)) if lines[i].startswith("```"))
    closing = next(i for i in range(opening + 1, len(lines)) if lines[i].startswith("```"))
    return [line.strip() for line in lines[opening + 1:closing] if line.strip()]


def shows(documented: str, printed: str) -> bool:
    """A README sample line shows a printed line: the same text, where `...` stands for any run of it."""
    parts = documented.split(ELLIPSIS)
    if not printed.startswith(parts[0]) or not printed.endswith(parts[-1]):
        return False
    at = len(parts[0])
    for part in parts[1:-1]:
        at = printed.find(part, at)
        if at < 0:
            return False
        at += len(part)
    return at <= len(printed) - len(parts[-1]) if len(parts) > 1 else documented == printed


def unshown(documented: list[str], printed: list[str]) -> list[str]:
    """The sample lines that no printed line shows, in order (each with the printed line it should be, if one
    starts the same way): empty when the sample is what the code prints."""
    wrong, at = [], 0
    for line in documented:
        match = next((i for i in range(at, len(printed)) if shows(line, printed[i])), None)
        if match is None:
            near = next((p for p in printed if p[:12] == line[:12]), None)
            wrong.append(f"README: {line!r}" + (f"\n  prints: {near!r}" if near else ""))
        else:
            at = match + 1
    return wrong
