"""Run a user-data shell part on this machine without letting it write outside a temporary folder.

`make synth` runs the GPU launch template's shell part to see what it leaves (tools/seams/node.py), on the
synth machine, often as root. Two fences keep it inside its temporary root:

1. Before anything runs, every literal absolute path in the script (outside comment lines) must name the fake
   node's /etc, /run or /proc/sys (moved into the temporary root) or /dev/null; a `..` path component, a
   `~name` (another user's home) and a path attached to a short option (`-t/usr/bin`) are refused too. A refused script is not run at all: the seam fails naming the
   token. The scan cannot tell a command from data (a heredoc's body is judged the same), so it errs towards
   refusing: in a script whose quoting it does not follow (a heredoc, a substitution, $'...'), comment lines are
   read too. This fence is the same on every machine, so the seam gives the same answer everywhere.
2. Where unprivileged user namespaces work (unshare(1): --user --map-root-user --mount --pid), the script runs
   chrooted in the temporary root, with /usr bound read-only (plus the merged-/usr links /bin, /lib...), in a
   private mount namespace (unshare's default propagation, private: nothing it mounts reaches this machine) and
   a private PID namespace (whatever it leaves running dies with it). A path the scan cannot see (computed at
   run time) then still lands inside the temporary root. Where namespaces are refused (some containers), the
   script runs with its /etc, /run and /proc/sys paths rewritten into the temporary root and the first fence
   alone: a path computed at run time is not contained there.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

MOVED = ("etc", "run", "proc/sys")
"""Absolute paths the fake node holds under its temporary root (the node's /etc and /run, and /proc/sys for an
`echo N > /proc/sys/vm/nr_hugepages`)."""
_HARMLESS = ("/dev/null",)
_ABSOLUTE = re.compile(r"(?<![\w.*-])/[^\s'\"`;|&<>(){}]*")
"""A literal absolute path: a '/' that does not continue a word or a relative path, up to a shell separator."""
_ALLOWED = re.compile(r"/(?:%s)(?=/|$)" % "|".join(re.escape(m) for m in MOVED))
_PARENT = re.compile(r"(?:^|(?<=[\s/'\"=:]))\.\.(?=[/\s'\";|&<>)]|$)")
_OTHER_HOME = re.compile(r"(?<![\w/.-])~\w+")
_ATTACHED = re.compile(r"(?:^|(?<=[\s'\"=]))-[A-Za-z]+/[^\s'\"`;|&<>(){}]*")
"""An absolute path attached to a short option (cp -t/usr/bin): refused whatever it names, as the rewrite where
namespaces are refused moves only a path that starts a word."""
_URL = re.compile(r"\b\w+://\S*")
TOOLS = ("mkdir", "cat", "tee", "cp", "install", "ln", "chmod", "touch", "sed")
"""What the fake node offers besides bash's builtins: tools that write files, nothing that deletes."""
RECORDED = ("systemctl", "sysctl")
_SYSTEM_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"
_MERGED_USR = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
TIMEOUT_S = 30


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    stderr: str
    refused: str = ""
    """The token that kept the script from running, or ''."""


_UNFOLLOWED = ("<<", "$(", "`", "$'", "${")
"""Heredocs, command, arithmetic and parameter substitutions, $'...' strings: quoting this reading does not follow."""
_METACHARACTERS = " \t|&;()<>"
"""bash's metacharacters besides newline: a word starts after one (bash manual, Definitions)."""


def _without_comments(script: str) -> list[str]:
    """The script's lines less its comment lines, as bash reads them (bash manual, Comments and Quoting): a line
    whose first word starts with '#', outside quotes. A quote left open runs on into the next lines, so a '#' line
    inside a multi-line string is kept, and so is a line after a backslash-newline. Every line but the shebang is kept
    where the script holds a construct of _UNFOLLOWED, or its quotes do not balance: a misreading here must refuse
    more, never less. Comments at the end of a line are kept too."""
    lines = script.split("\n")  # bash ends a line at a newline only (str.splitlines also splits at \r, \f...)
    every = lines[1:] if lines[0].startswith("#!") else lines  # the shebang names the interpreter; it runs nothing
    kept, quote, continued = [], "", False
    for line in lines:
        if not quote and not continued and line.lstrip(" \t").startswith("#"):
            continue
        if any(construct in line for construct in _UNFOLLOWED):
            return every
        continued, at = False, 0
        while at < len(line):
            char = line[at]
            if quote == "'":
                quote = "" if char == "'" else quote
            elif char == "\\":
                continued = at == len(line) - 1
                at += 2
                continue
            elif quote == '"':
                quote = "" if char == '"' else quote
            elif char in "'\"":
                quote = char
            elif char == "#" and (at == 0 or line[at - 1] in _METACHARACTERS):
                break  # a comment to the end of the line: its quotes open nothing
            at += 1
        kept.append(line)
    return every if quote else kept


def refused_token(script: str) -> str:
    """The first token that could make the script write outside its temporary root, or ''."""
    for line in _without_comments(script):  # the shebang and comments are not run
        line = _URL.sub("", line)
        for match in _ABSOLUTE.finditer(line):
            token = match.group()
            if token not in _HARMLESS and not _ALLOWED.match(token):
                return token
        for pattern in (_PARENT, _OTHER_HOME, _ATTACHED):
            if found := pattern.search(line):
                return found.group()
    return ""


@functools.lru_cache(maxsize=1)
def namespaces_work() -> bool:
    """Whether this machine lets an unprivileged process build the chroot (user, mount and PID namespaces)."""
    unshare = shutil.which("unshare")
    if not unshare:
        return False
    try:
        return subprocess.run([unshare, "--user", "--map-root-user", "--mount", "--pid", "--fork", "--kill-child",
                               "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _prepare(root: Path, calls: str) -> None:
    """The fake node's folders and tools: real file tools, recorders for systemctl and sysctl."""
    for moved in MOVED:
        (root / moved).mkdir(parents=True, exist_ok=True)
    (root / "proc/sys/vm").mkdir(parents=True)
    tools = root / ".tools"
    tools.mkdir()
    for tool in TOOLS:
        if found := shutil.which(tool, path=_SYSTEM_PATH):
            (tools / tool).symlink_to(found)
    for tool in RECORDED:
        (tools / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> "{calls}"\n')
        (tools / tool).chmod(0o755)


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    try:
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
        return done.returncode, done.stderr
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {TIMEOUT_S} s"


def _run_chrooted(root: Path, script: str) -> tuple[int, str]:
    (root / "usr").mkdir()
    binds = ["mount --rbind -o ro /usr usr"]
    for name in _MERGED_USR:
        host = Path("/") / name
        if host.is_symlink():
            (root / name).symlink_to(host.readlink())
        elif host.is_dir():
            (root / name).mkdir()
            binds.append(f"mount --rbind -o ro /{name} {name}")
    (root / "dev").mkdir()
    (root / "dev/null").touch()  # a plain empty file: what a redirect to /dev/null writes stays here
    _prepare(root, "/.calls")
    (root / ".part").write_text(script)
    bash = shutil.which("bash", path=_SYSTEM_PATH) or "/bin/bash"
    inside = " && ".join(binds + [f"exec chroot . /usr/bin/env -i PATH=/.tools HOME=/ LANG=C {bash} /.part"])
    return _run([shutil.which("unshare") or "unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork",
                 "--kill-child", "sh", "-c", inside], cwd=root, env={"PATH": _SYSTEM_PATH, "LANG": "C"})


def _run_rewritten(root: Path, script: str) -> tuple[int, str]:
    _prepare(root, str(root / ".calls"))
    moved = _ABSOLUTE.sub(lambda m: f"{root}{m.group()}" if _ALLOWED.match(m.group()) else m.group(), script)
    (root / ".part").write_text(moved)
    return _run([shutil.which("bash", path=_SYSTEM_PATH) or "/bin/bash", str(root / ".part")], cwd=root,
                env={"PATH": str(root / ".tools"), "HOME": str(root), "LANG": "C"})


def run(root: Path, script: str, chroot: bool | None = None) -> Outcome:
    """Run the script with `root` as the fake node's root (see the module's docstring); `chroot` None: wherever
    namespaces work."""
    if token := refused_token(script):
        return Outcome(-1, "", refused=token)
    chrooted = namespaces_work() if chroot is None else chroot
    exit_code, stderr = (_run_chrooted if chrooted else _run_rewritten)(root, script)
    return Outcome(exit_code, stderr.replace(str(root), ""))
