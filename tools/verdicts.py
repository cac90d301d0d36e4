"""A preflight check's verdict: PASS, WARN or FAIL, one line of reason and the fix."""

from __future__ import annotations

from dataclasses import dataclass

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"


@dataclass(frozen=True)
class Check:
    name: str
    verdict: str
    reason: str
    fix: str = ""
