"""Installing the requirements' whole dependency tree in two pip processes at once.

pip installs one wheel after another on one core: from a fresh clone `make test` spent about 190 s there, with the
other core idle. requirements-lock.txt names every distribution the requirement files pull in, at the version
installed when it was written, with its installed size. `install` installs one set of it (synth: what
requirements.txt pulls in; dev: everything requirements-dev.txt does) with `pip install --no-deps`, in two pips
that each take half of the megabytes. The Makefile then runs pip on the requirement files themselves, as before:
pip's resolver stays the judge (on another platform the lock may name a wheel that does not exist there; the
locked install then fails at its start and the plain install does the work alone, one core as before).

    python -m tools.locked_install install requirements-lock.txt synth|dev
    python -m tools.locked_install lock requirements-lock.txt requirements.txt requirements-dev.txt   (make lock)

`install` imports only the standard library: it runs before anything is installed.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

SETS = ("synth", "dev")
LINE = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)==(?P<version>\S+)\s+#\s*(?P<set>synth|dev)\s+(?P<mb>\d+)\s*MB$")
PIP = ("-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps")


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    set: str
    mb: int

    def line(self) -> str:
        return f"{self.name}=={self.version}  # {self.set} {self.mb} MB"


def read_lock(path: Path) -> list[Pin]:
    """The lock's pins; ValueError naming the line that is not `name==version  # synth|dev N MB`."""
    pins = []
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if not text.strip() or text.startswith("#"):
            continue
        match = LINE.match(text.strip())
        if not match:
            raise ValueError(f"{path}:{number}: expected 'name==version  # synth|dev N MB', got {text!r}")
        pins.append(Pin(match["name"], match["version"], match["set"], int(match["mb"])))
    return pins


def chosen(pins: list[Pin], wanted: str) -> list[Pin]:
    """The pins of a set (dev holds synth's too), less those installed at their version already."""
    def installed(pin: Pin) -> bool:
        try:
            return importlib.metadata.version(pin.name) == pin.version
        except importlib.metadata.PackageNotFoundError:
            return False

    return [p for p in pins if (wanted == "dev" or p.set == "synth") and not installed(p)]


def halves(pins: list[Pin]) -> tuple[list[Pin], list[Pin]]:
    """Two lists of about the same megabytes: the largest first, each to the lighter side."""
    sides: tuple[list[Pin], list[Pin]] = ([], [])
    for pin in sorted(pins, key=lambda p: (-p.mb, p.name)):
        min(sides, key=lambda side: sum(p.mb for p in side)).append(pin)
    return sides


def install(lock: Path, wanted: str) -> int:
    """Both halves at once; pip's exit status, the first that failed."""
    todo = chosen(read_lock(lock), wanted)
    with tempfile.TemporaryDirectory() as folder:
        runs = []
        for i, side in enumerate(halves(todo)):
            if side:
                listing = Path(folder) / f"part{i}.txt"
                listing.write_text("".join(f"{p.name}=={p.version}\n" for p in side))
                runs.append(subprocess.Popen([sys.executable, *PIP, "-r", str(listing)]))
        codes = [run.wait() for run in runs]
    return next((code for code in codes if code), 0)


def requirement_lines(path: Path) -> list[str]:
    """The requirement strings of a requirements file, following its `-r` includes."""
    lines = []
    for text in path.read_text().splitlines():
        text = text.split(" #")[0].strip()
        if text.startswith("-r"):
            lines += requirement_lines(path.parent / text[2:].strip())
        elif text and not text.startswith("#"):
            lines.append(text)
    return lines


def closure(requirement_file: Path) -> dict[str, importlib.metadata.Distribution]:
    """Every installed distribution the file's requirements pull in (extras and markers as pip evaluates them for
    this interpreter), by normalised name."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: dict[str, importlib.metadata.Distribution] = {}
    seen: set[tuple[str, frozenset]] = set()
    todo = [Requirement(line) for line in requirement_lines(requirement_file)]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if (name, frozenset(requirement.extras)) in seen:
            continue
        seen.add((name, frozenset(requirement.extras)))
        dist = found.setdefault(name, importlib.metadata.distribution(requirement.name))
        for text in dist.requires or []:
            needed = Requirement(text)
            if needed.marker is None or any(needed.marker.evaluate({"extra": extra})
                                            for extra in requirement.extras or {""}):
                todo.append(needed)
    return found


def installed_mb(dist: importlib.metadata.Distribution) -> int:
    size = 0
    for file in dist.files or []:
        path = Path(file.locate())
        if path.is_file():
            size += path.stat().st_size
    return round(size / 1e6)


def lock(path: Path, synth_requirements: Path, dev_requirements: Path) -> list[Pin]:
    synth = closure(synth_requirements)
    pins = [Pin(dist.metadata["Name"], dist.version, "synth" if name in synth else "dev", installed_mb(dist))
            for name, dist in sorted(closure(dev_requirements).items())]
    path.write_text("# Every distribution requirements.txt (synth) and requirements-dev.txt (dev) pull in, as installed\n"
                    "# on Linux x86_64 with Python 3.11, and its installed size: tools/locked_install.py installs them\n"
                    "# in two pips at once. Written by `make lock`; tests/test_lock.py checks it against the files.\n"
                    + "".join(pin.line() + "\n" for pin in pins))
    return pins


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "install" and argv[2] in SETS:
        try:
            return install(Path(argv[1]), argv[2])
        except (OSError, ValueError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    if len(argv) == 4 and argv[0] == "lock":
        lock(Path(argv[1]), Path(argv[2]), Path(argv[3]))
        return 0
    print("usage: python -m tools.locked_install install LOCK synth|dev | lock LOCK REQUIREMENTS DEV_REQUIREMENTS",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
