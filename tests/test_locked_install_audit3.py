"""tools/locked_install.py's `make lock` half: each distribution's installed size in MB (10^6 bytes, of the files
that are there), and the lock written from the two closures: synth or dev, sorted, each `after` the one whose file
it replaces."""

from __future__ import annotations

from pathlib import Path

from tools import locked_install


class _File:
    def __init__(self, path: Path, name: str):
        self.path, self.name = path, name

    def locate(self):
        return self.path

    def __str__(self):
        return self.name


class _Dist:
    def __init__(self, name: str, version: str, files: list, requires: list[str] | None = None):
        self.metadata, self.version, self.files, self.requires = {"Name": name}, version, files, requires or []


def _sized(folder: Path, name: str, size: int) -> _File:
    path = folder / name.replace("/", "_")
    with path.open("wb") as stream:
        stream.truncate(size)
    return _File(path, name)


def test_the_installed_size_is_the_sum_of_the_files_there_in_megabytes(tmp_path):
    # 1.4 + 1.2 = 2.6 MB -> 3 (MB of 10^6 bytes, as pip and the lock's header count; 2.48 MiB would round to 2).
    dist = _Dist("a", "1", [_sized(tmp_path, "a/x.py", 1_400_000), _sized(tmp_path, "a/y.so", 1_200_000),
                            _File(tmp_path / "gone.py", "a/gone.py"), _File(tmp_path, "a/")])
    assert locked_install.installed_mb(dist) == 3


def test_a_distribution_without_a_record_of_its_files_is_zero_mb():
    assert locked_install.installed_mb(_Dist("a", "1", None)) == 0


def test_make_lock_writes_every_dev_distribution_with_its_set_size_and_after(tmp_path, monkeypatch):
    shared = "pkg/shared.py"
    schema = _Dist("Schema-Pkg", "2.0", [_sized(tmp_path, shared, 1_000_000)])
    lib = _Dist("lib", "1.5", [_sized(tmp_path, "lib/__init__.py", 2_000_000), _File(schema.files[0].path, shared)],
                ["schema-pkg>=1"])
    tester = _Dist("tester", "9.0", [_sized(tmp_path, "tester.py", 10)])
    closures = {"synth.txt": {"lib": lib, "schema-pkg": schema},
                "dev.txt": {"tester": tester, "lib": lib, "schema-pkg": schema}}
    monkeypatch.setattr(locked_install, "closure", lambda path: closures[Path(path).name])
    lock = tmp_path / "lock.txt"
    assert locked_install.main(["lock", str(lock), str(tmp_path / "synth.txt"), str(tmp_path / "dev.txt")]) == 0
    pins = [line for line in lock.read_text().splitlines() if not line.startswith("#")]
    assert pins == ["lib==1.5  # synth 3 MB, after Schema-Pkg",
                    "Schema-Pkg==2.0  # synth 1 MB",
                    "tester==9.0  # dev 0 MB"]
    assert locked_install.read_lock(lock) == [locked_install.Pin("lib", "1.5", "synth", 3, "Schema-Pkg"),
                                              locked_install.Pin("Schema-Pkg", "2.0", "synth", 1),
                                              locked_install.Pin("tester", "9.0", "dev", 0)]
