"""docs/testing.md's "Two values for every setting" table is complete: a row for every setting of the trainer
(TrainConfig) and of the stack (each dataclass of stacks/settings.py), no row for a setting that does not exist,
and every test a row names exists (its file, class and function found by parsing, without running pytest)."""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from pathlib import Path

from tests.conftest import ROOT

SECTION = "## Two values for every setting"
NODE_ID = re.compile(r"`(tests/[^`\s]+\.py::[^`\s]+)`")


def settings() -> set[str]:
    """Class.field of every setting: TrainConfig's fields and those of every dataclass in stacks/settings.py,
    less the fields that hold another settings dataclass (their fields have rows of their own)."""
    import typing

    import stacks.settings
    from training.config import TrainConfig

    classes = [TrainConfig] + [c for c in vars(stacks.settings).values()
                               if dataclasses.is_dataclass(c) and c.__module__ == stacks.settings.__name__]
    names = set()
    for cls in classes:
        hints = typing.get_type_hints(cls)
        names |= {f"{cls.__name__}.{f.name}" for f in dataclasses.fields(cls) if not dataclasses.is_dataclass(hints[f.name])}
    return names


def table(markdown: str) -> dict[str, list[str]]:
    """The section's rows: `Class.field` in the first cell, the tests' node ids in the second."""
    lines = markdown.splitlines()
    start = lines.index(SECTION)
    rows: dict[str, list[str]] = {}
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if not line.startswith("| `"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        setting = cells[0].strip("`")
        assert setting not in rows, f"two rows for {setting}"
        rows[setting] = NODE_ID.findall(cells[1])
    return rows


@functools.cache
def _defined(path: Path) -> frozenset[str]:
    """`name` and `Class::name` of the tests pytest collects from a file (test_* functions, Test* classes)."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            found.add(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            found |= {f"{node.name}::{item.name}" for item in node.body
                      if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test")}
    return frozenset(found)


def test_exists(node_id: str, root: Path = ROOT) -> bool:
    path, _, name = node_id.partition("::")
    name = name.split("[", 1)[0]  # a parametrized case's id
    return (root / path).is_file() and name in _defined(root / path)


test_exists.__test__ = False  # a helper, not a test


def problems(markdown: str, known: set[str], root: Path = ROOT) -> list[str]:
    rows = table(markdown)
    found = [f"{s}: no row" for s in sorted(known - rows.keys())]
    found += [f"{s}: a row, but no such setting" for s in sorted(rows.keys() - known)]
    found += [f"{s}: the row names no test" for s, tests in sorted(rows.items()) if not tests]
    found += [f"{s}: {t} does not exist" for s, tests in sorted(rows.items()) for t in tests if not test_exists(t, root)]
    return found


def test_every_setting_has_a_row_whose_tests_exist():
    assert problems((ROOT / "docs" / "testing.md").read_text(), settings()) == []


EXAMPLE_TEST = "tests/infra/test_settings_table.py::test_every_setting_has_a_row_whose_tests_exist"


def example(*rows: str) -> str:
    return "\n".join([SECTION, "", "| setting | test | where it looks |", "| --- | --- | --- |", *rows, "", "## Next"])


def test_a_setting_without_a_row_fails():
    markdown = example(f"| `TrainConfig.lr` | `{EXAMPLE_TEST}` | x |")
    assert problems(markdown, {"TrainConfig.lr", "TrainConfig.seed"}) == ["TrainConfig.seed: no row"]


def test_a_row_naming_a_missing_test_fails():
    markdown = example(f"| `TrainConfig.lr` | `{EXAMPLE_TEST}`, `tests/infra/test_settings_table.py::test_nothing` | x |",
                       "| `TrainConfig.seed` | `tests/infra/test_no_such_file.py::test_seed` | x |")
    assert problems(markdown, {"TrainConfig.lr", "TrainConfig.seed"}) == [
        "TrainConfig.lr: tests/infra/test_settings_table.py::test_nothing does not exist",
        "TrainConfig.seed: tests/infra/test_no_such_file.py::test_seed does not exist"]


def test_a_row_naming_no_setting_fails():
    markdown = example(f"| `TrainConfig.lr` | `{EXAMPLE_TEST}` | x |", f"| `TrainConfig.learning_rate` | `{EXAMPLE_TEST}` | x |")
    assert problems(markdown, {"TrainConfig.lr"}) == ["TrainConfig.learning_rate: a row, but no such setting"]


def test_a_class_method_and_a_parametrized_case_are_found(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("class TestA:\n    def test_b(self): pass\n\ndef helper(): pass\n")
    assert test_exists("tests/test_x.py::TestA::test_b[case]", tmp_path)
    assert not test_exists("tests/test_x.py::helper", tmp_path)
