"""tools/verdicts.py: a check's verdict words and its fix, as preflight prints them."""

from __future__ import annotations

from tools.preflight import format_table
from tools.verdicts import FAIL, PASS, WARN, Check


def test_a_check_without_a_fix_prints_none():
    # A WARN that names no fix is one line: no empty or made-up "fix:" line under it.
    assert Check("spot price", WARN, "no price listed").fix == ""
    assert format_table([Check("spot price", WARN, "no price listed")]) == "WARN  spot price  no price listed"


def test_the_verdicts_are_the_three_words_the_table_prints():
    assert (PASS, WARN, FAIL) == ("PASS", "WARN", "FAIL")
