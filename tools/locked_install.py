"""Installing the requirements' whole dependency tree in two pip processes at once.

pip installs one wheel after another on one core: from a fresh clone `make test` spent about 190 s there, with the
other core idle. requirements-lock.txt names every distribution the requirement files pull in, at the version
installed when it was written, with its installed size. `install` installs one set of it (synth: what
requirements.txt pulls in; dev: everything requirements-dev.txt does) with `pip install --no-deps --no-compile`
(Python compiles a module when it is first imported; pip compiled all 530 MB), in two pips
that each take half of the megabytes. The Makefile then runs pip on the requirement files themselves, as before:
pip's resolver stays the judge (on another platform the lock may name a wheel that does not exist there; the
locked install then fails at its start and the plain install does the work alone, one core as before).

    python -m tools.locked_install install requirements-lock.txt synth|dev
    python -m tools.locked_install lock requirements-lock.txt requirements.txt requirements-dev.txt   (make lock)

Two distributions may install the same file (aws-cdk-lib and aws-cdk.cloud-assembly-schema both hold
aws_cdk/cloud_assembly_schema/__init__.py). pip installs a distribution after those it depends on, so the
dependent's copy is the one left; installed in another order, jsii could not find aws-cdk-lib's types. The lock
marks such a distribution `after` the one it must follow, and `install` runs it on that one's side, in a pip
started once that one is in.

`install` imports only the standard library: it runs before anything is installed.
"""

from __future__ import annotations

import concurrent.futures
import importlib.metadata
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

SETS = ("synth", "dev")
LINE = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)==(?P<version>\S+)\s+#\s*(?P<set>synth|dev)\s+(?P<mb>\d+)\s*MB"
                  r"(?:, after (?P<after>[A-Za-z0-9._-]+))?$")
FORMAT = "name==version  # synth|dev N MB[, after NAME]"
PIP = ("-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--no-compile")


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    set: str
    mb: int
    after: str | None = None  # a distribution that installs a file of this one's: this one goes in after it

    def line(self) -> str:
        return f"{self.name}=={self.version}  # {self.set} {self.mb} MB" + (f", after {self.after}" if self.after else "")


def read_lock(path: Path) -> list[Pin]:
    """The lock's pins; ValueError naming a line not in FORMAT."""
    pins = []
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if not text.strip() or text.startswith("#"):
            continue
        match = LINE.match(text.strip())
        if not match:
            raise ValueError(f"{path}:{number}: expected '{FORMAT}', got {text!r}")
        pins.append(Pin(match["name"], match["version"], match["set"], int(match["mb"]), match["after"]))
    return pins


def chosen(pins: list[Pin], wanted: str) -> list[Pin]:
    """The pins of a set (dev holds synth's too), less those installed at their version already."""
    def installed(pin: Pin) -> bool:
        try:
            return importlib.metadata.version(pin.name) == pin.version
        except importlib.metadata.PackageNotFoundError:
            return False

    return [p for p in pins if (wanted == "dev" or p.set == "synth") and not installed(p)]


def halves(pins: list[Pin]) -> tuple[list[list[Pin]], list[list[Pin]]]:
    """Two sides of about the same megabytes, each a list of rounds (one pip each, one after the other): the largest
    first, each to the lighter side; a pin `after` another goes to that one's side, a round later."""
    sides: tuple[list[list[Pin]], list[list[Pin]]] = ([[]], [[]])
    placed: dict[str, tuple[int, int]] = {}  # name -> (side, round)
    names = {p.name for p in pins}
    waiting = sorted(pins, key=lambda p: (-p.mb, p.name))
    while waiting:
        pin = next((p for p in waiting if p.after is None or p.after in placed or p.after not in names), None)
        if pin is None:
            raise ValueError(f"requirements lock: the 'after' of {waiting[0].name} leads back to it")
        waiting.remove(pin)
        if pin.after in placed:
            side, round_ = placed[pin.after][0], placed[pin.after][1] + 1
        else:
            side, round_ = min((0, 1), key=lambda i: sum(p.mb for pins_of_round in sides[i] for p in pins_of_round)), 0
        sides[side].extend([] for _ in range(round_ + 1 - len(sides[side])))
        sides[side][round_].append(pin)
        placed[pin.name] = (side, round_)
    return sides


def _pip_rounds(rounds: list[list[Pin]], folder: Path, side: int) -> int:
    """One pip a round, each once the one before succeeded; the first failure's exit status."""
    for number, pins in enumerate(rounds):
        if not pins:
            continue
        listing = folder / f"side{side}-round{number}.txt"
        listing.write_text("".join(f"{p.name}=={p.version}\n" for p in pins))
        code = subprocess.Popen([sys.executable, *PIP, "-r", str(listing)]).wait()
        if code:
            return code
    return 0


def install(lock: Path, wanted: str) -> int:
    """Both sides at once; pip's exit status, the first that failed."""
    sides = halves(chosen(read_lock(lock), wanted))
    with tempfile.TemporaryDirectory() as folder, concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(_pip_rounds, rounds, Path(folder), side) for side, rounds in enumerate(sides)]
        codes = [run.result() for run in runs]
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


def _requirements(dist: importlib.metadata.Distribution, extras) -> list:
    """What a distribution requires for these extras, markers evaluated as pip does for this interpreter."""
    from packaging.requirements import Requirement

    needed = [Requirement(text) for text in dist.requires or []]
    return [r for r in needed if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in extras or {""})]


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
        todo += _requirements(dist, requirement.extras)
    return found


def install_order(dists: dict[str, importlib.metadata.Distribution]) -> dict[str, str]:
    """name -> the distribution it must be installed after: of two that install the same file, the one that depends
    on the other (pip installs a dependency first, so the dependent's copy is the one left). ValueError for two
    that share a file and neither depends on the other: pip's order for them is not theirs to set."""
    from packaging.utils import canonicalize_name

    def depends(name: str, on: str) -> bool:
        todo, seen = [name], set()
        while todo:
            current = todo.pop()
            for requirement in _requirements(dists[current], ()):
                needed = canonicalize_name(requirement.name)
                if needed == on:
                    return True
                if needed in dists and needed not in seen:
                    seen.add(needed)
                    todo.append(needed)
        return False

    owners: dict[str, list[str]] = {}
    for name, dist in dists.items():
        for file in dist.files or []:
            if not str(file).startswith("..") and ".dist-info/" not in str(file) and "__pycache__" not in str(file):
                owners.setdefault(str(file), []).append(name)
    after = {}
    for file, names in owners.items():
        for first, second in zip(names, names[1:]):
            if depends(second, first):
                after[second] = dists[first].metadata["Name"]
            elif depends(first, second):
                after[first] = dists[second].metadata["Name"]
            else:
                raise ValueError(f"{file}: installed by {first} and {second}, neither of which depends on the other")
    return after


def installed_mb(dist: importlib.metadata.Distribution) -> int:
    size = 0
    for file in dist.files or []:
        path = Path(file.locate())
        if path.is_file():
            size += path.stat().st_size
    return round(size / 1e6)


def lock(path: Path, synth_requirements: Path, dev_requirements: Path) -> list[Pin]:
    synth, dev = closure(synth_requirements), closure(dev_requirements)
    after = install_order(dev)
    pins = [Pin(dist.metadata["Name"], dist.version, "synth" if name in synth else "dev", installed_mb(dist),
                after.get(name)) for name, dist in sorted(dev.items())]
    path.write_text("# Every distribution requirements.txt (synth) and requirements-dev.txt (dev) pull in, as installed\n"
                    "# on Linux x86_64 with Python 3.11, and its installed size: tools/locked_install.py installs them\n"
                    "# in two pips at once, each `after` the one whose file it replaces. Written by `make lock`; tests/test_lock.py\n"
                    "# checks it against the files and what pip installed.\n"
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
