"""The mutation score of `make mutation`: `mutmut results --all true | python -m tools.mutation_score`.

Killed over killed + survived (+ timeouts, which are kills by another name: the mutant hung the tests),
with the survivors docs/testing.md judges equivalent (a list of `mutant.name`: why) set aside. Mutants
no selected test reaches are counted apart: no test could kill them.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

EQUIVALENT_HEADING = "## Equivalent mutants"


def equivalent_mutants(testing_md: str) -> set[str]:
    """The mutant names listed under the equivalent-mutants heading of docs/testing.md."""
    section = testing_md.split(EQUIVALENT_HEADING, 1)[1].split("\n## ", 1)[0] if EQUIVALENT_HEADING in testing_md else ""
    return set(re.findall(r"^- `([\w.ǁ]+__mutmut_\d+)`", section, flags=re.M))


def score(results: str, equivalent: set[str]) -> tuple[Counter, list[str]]:
    counts, survivors = Counter(), []
    for line in results.splitlines():
        name, _, status = line.strip().rpartition(": ")
        if not name:
            continue
        if status == "survived" and name in equivalent:
            status = "equivalent"
        elif status == "survived":
            survivors.append(name)
        counts[status] += 1
    return counts, survivors


def main() -> int:
    testing_md = Path("docs/testing.md")
    equivalent = equivalent_mutants(testing_md.read_text()) if testing_md.exists() else set()
    counts, survivors = score(sys.stdin.read(), equivalent)
    judged = counts["killed"] + counts["timeout"] + counts["survived"]
    print("mutants: " + ", ".join(f"{n} {status}" for status, n in counts.most_common()))
    if judged:
        print(f"score: {(counts['killed'] + counts['timeout']) / judged:.1%} of {judged} non-equivalent mutants killed")
    for name in survivors:
        print(f"survived: {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
