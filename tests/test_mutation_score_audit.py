"""tools/mutation_score.py: `make mutation`'s score from `mutmut results --all true` (one `name: status` a line),
with the survivors docs/testing.md judges equivalent set aside. Worked examples with counted figures."""

from __future__ import annotations

import io
from collections import Counter

from tools import mutation_score

TESTING_MD = """# Testing

## Equivalent mutants

Survivors no test can kill.

- `training.a.x_f__mutmut_1`: the same program
- `training.b.xǁC + ǁg__mutmut_2`: not a name
- `cdk_constructs.c.x_h__mutmut_3`: the same program

## Next section

- `training.d.x_k__mutmut_4`: listed under another heading
"""
# mutmut's class methods are named with ǁ; names hold dots. The status is after the last ": ".
RESULTS = """    training.a.x_f__mutmut_1: survived
    training.a.x_f__mutmut_2: killed
    cdk_constructs.c.x_h__mutmut_3: killed
    training.d.x_k__mutmut_4: survived
    training.e.xǁCǁm__mutmut_5: timeout
    training.e.x_n__mutmut_6: no tests

"""


def test_equivalent_mutants_are_the_listed_names_under_their_heading_only():
    assert mutation_score.equivalent_mutants(TESTING_MD) == {"training.a.x_f__mutmut_1", "cdk_constructs.c.x_h__mutmut_3"}
    assert mutation_score.equivalent_mutants("# Testing\n- `training.a.x_f__mutmut_1`: no heading\n") == set()


def test_an_equivalent_survivor_is_set_apart_and_a_killed_one_stays_killed():
    counts, survivors = mutation_score.score(RESULTS, {"training.a.x_f__mutmut_1", "cdk_constructs.c.x_h__mutmut_3"})
    assert counts == Counter({"equivalent": 1, "killed": 2, "survived": 1, "timeout": 1, "no tests": 1})
    assert survivors == ["training.d.x_k__mutmut_4"]


def test_the_score_counts_timeouts_as_kills_over_the_judged_mutants(monkeypatch, capsys, tmp_path):
    # 2 killed + 1 timeout of 4 judged (the equivalent and the untested one aside): 75.0%.
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "testing.md").write_text(TESTING_MD)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.stdin", io.StringIO(RESULTS))
    assert mutation_score.main() == 0
    out = capsys.readouterr().out
    assert "score: 75.0% of 4 non-equivalent mutants killed" in out
    assert "survived: training.d.x_k__mutmut_4" in out

