"""The node's side of the seam: what a container on a managed node group's node will see.

A container inherits its rlimits from containerd (through the shim and runc), plus what containerd's base
OCI spec sets. On the EKS AL2023 AMIs (awslabs/amazon-eks-ami; README "Shared knowledge: memlock"):
- containerd's unit sets no LimitMEMLOCK, so a container gets 8 MiB (systemd's DefaultLimitMEMLOCK and
  the kernel's default since 5.16);
- nodeadm's base runtime spec (nodeadm/internal/containerd/base-runtime-spec.json) sets RLIMIT_NOFILE
  65536:1048576;
- no huge pages are reserved.
The launch template's user data changes that: a shell part writing a containerd drop-in with
LimitMEMLOCK (it runs in cloud-final, before nodeadm-run.service: amazon-eks-ami
templates/al2023/runtime/rootfs/etc/systemd/system/nodeadm-run.service), a vm.nr_hugepages setting, or a
NodeConfig part whose spec.containerd.baseRuntimeSpec adds rlimits (amazon-eks-ami PR 1794).
EKS requires a managed node group's launch template user data to be a MIME multi-part archive (EKS
User Guide, "Customize managed nodes with launch templates": "Amazon EKS merges it with the user data
Amazon EKS needs ... the user data must be in the MIME multi-part archive format").
EFA registers memory with the device: a pod using vpc.amazonaws.com/efa needs an unlimited memlock
(aws-efa-k8s-device-plugin and the EFA user guide: "ulimit -l unlimited").

A shell part is judged by what it does, not by what it says: it runs under bash on a fake node whose /etc, /run
and /proc/sys are a temporary folder (tools/seams/fake_node.py: a script naming any other absolute path is refused
before it runs, and where namespaces work it runs chrooted there), systemctl and sysctl recorded instead of run,
and only a few file tools on PATH (so a command the fake node lacks fails the part instead of touching this
machine). Then the containerd
drop-ins it left are read as systemd reads them (systemd.unit(5) "Drop-in": every *.conf of
containerd.service.d/ in /etc and /run, a name in /etc hiding the same name in /run, applied in file-name order;
systemd.exec(5): LimitMEMLOCK= in the [Service] section, the last assignment wins, "infinity" unlimited; a value
systemd cannot parse, such as ulimit's "unlimited", is ignored).
The MIME document must parse without defects (RFC 2046 5.1.1: the body ends with the close delimiter
"--boundary--"): Python's email parser records each malformation as a defect where cloud-init's own parser,
also Python's email package (cloudinit/user_data.py), may drop or misread a part.
"""

from __future__ import annotations

import base64
import binascii
import email
import functools
import math
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from tools.seams import fake_node
from tools.seams.cfn import Resolver

MIB = 1 << 20
AL2023_MEMLOCK = 8 * MIB
AL2023_NOFILE = (65536, 1048576)
UNLIMITED = math.inf
_DROP_IN_DIRS = ("etc/systemd/system/containerd.service.d", "run/systemd/system/containerd.service.d")
"""Where a user-data script can put a containerd drop-in, in systemd's order of precedence."""
_HUGEPAGES = re.compile(r"vm\.nr_hugepages\s*=\s*(\d+)|echo\s+(\d+)\s*>\s*/proc/sys/vm/nr_hugepages")


@dataclass(frozen=True)
class NodeView:
    memlock: float
    """Bytes, or math.inf for unlimited."""
    nofile: tuple[int, int]
    hugepages_2mi: int
    multipart: bool
    has_user_data: bool
    mime_defects: tuple[str, ...] = ()
    """The email parser's defects, of every part."""
    shell_note: str = ""
    """What running the shell parts did, when it left no drop-in: for the problem's line."""
    refused: tuple[str, ...] = ()
    """Tokens of shell parts not run because they could write outside the fake node's root."""


_SIZE_UNITS = {"E": 1 << 60, "P": 1 << 50, "T": 1 << 40, "G": 1 << 30, "M": MIB, "K": 1 << 10, "B": 1, "": 1}
_SIZE_TERM = re.compile(r"\s*(\d+)(?:\.(\d*))?\s*([EPTGMKB]?)")


def _size(text: str) -> int | None:
    """systemd's parse_size, base 1024 (src/basic/parse-util.c): terms such as 8M, 1.5G or 1G 512M (each unit at
    most once, larger first); None where systemd refuses it."""
    total, at, allowed = 0, 0, list(_SIZE_UNITS)
    while True:
        term = _SIZE_TERM.match(text, at)
        if not term or term.group(3) not in allowed:
            return None
        factor = _SIZE_UNITS[term.group(3)]
        total += int(term.group(1)) * factor + int(float(f"0.{term.group(2) or 0}") * factor)
        allowed, at = allowed[allowed.index(term.group(3)) + 1:], term.end()
        if at == len(text):
            return total


def _memlock_value(text: str) -> float | None:
    """A LimitMEMLOCK= value as systemd's rlimit_parse reads it (src/basic/rlimit-util.c): "infinity" or a size,
    or soft:hard, of which the soft limit binds; None where systemd ignores the line (config_parse_rlimit: a value it
    cannot parse, such as ulimit's "unlimited", or a soft limit above the hard one)."""
    soft_text, _, hard_text = text.partition(":")
    soft, hard = (UNLIMITED if part == "infinity" else _size(part) for part in (soft_text, hard_text or soft_text))
    if soft is None or hard is None or ":" in hard_text or soft > hard:
        return None
    return soft


def _rlimit_value(value) -> float:
    """An OCI runtime spec rlimit: RLIM_INFINITY (2**64-1, or -1 as a signed value) is unlimited."""
    return UNLIMITED if value in (-1, 2**64 - 1, "18446744073709551615") else int(value)


def _parts(user_data: str) -> tuple[bool, list[tuple[str, str]], tuple[str, ...]]:
    """(is MIME multipart, [(content type, text)], the parser's defects) of decoded user data."""
    message = email.message_from_string(user_data)
    if not message.is_multipart():
        defects = tuple(type(d).__name__ for d in message.defects) if message.get_content_maintype() == "multipart" else ()
        return False, [("text/x-shellscript" if user_data.startswith("#!") else "text/plain", user_data)], defects
    parts = [(part.get_content_type(), (part.get_payload(decode=True) or b"").decode())
             for part in message.walk() if not part.is_multipart()]
    return True, parts, tuple(type(d).__name__ for part in message.walk() for d in part.defects)


@dataclass(frozen=True)
class ShellEffect:
    memlock: float | None
    """What the containerd drop-ins the script left set, or None when they set nothing."""
    exit_code: int
    stderr: str
    refused: str = ""
    """The token that kept the script from running (fake_node.refused_token), or ''."""


def _limit_memlock(drop_in: str) -> float | None:
    """The last LimitMEMLOCK= of the file's [Service] section that systemd can parse (systemd.exec(5)); outside that
    section, or unparsable, systemd ignores it."""
    section, value = None, None
    for line in drop_in.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif section == "Service" and "=" in line:
            key, _, text = line.partition("=")
            parsed = _memlock_value(text.strip()) if key.strip() == "LimitMEMLOCK" else None
            value = parsed if parsed is not None else value
    return value


@functools.lru_cache(maxsize=32)
def run_shell_part(script: str) -> ShellEffect:
    """Run a user-data shell part on a fake node (see the module's docstring) and read the containerd
    drop-ins it left."""
    with tempfile.TemporaryDirectory(prefix="fake-node-") as folder:
        root = Path(folder)
        outcome = fake_node.run(root, script)
        drop_ins: dict[str, Path] = {}
        for folder_name in reversed(_DROP_IN_DIRS):  # /etc last: its file hides /run's of the same name
            for path in sorted((root / folder_name).glob("*.conf")) if (root / folder_name).is_dir() else []:
                drop_ins[path.name] = path
        memlock = None
        for name in sorted(drop_ins):
            value = _limit_memlock(drop_ins[name].read_text())
            memlock = value if value is not None else memlock
    return ShellEffect(memlock, outcome.exit_code, outcome.stderr, outcome.refused)


def _shell_note(effect: ShellEffect) -> str:
    last = effect.stderr.strip().splitlines()[-1:] or ["no error"]
    return (f"; its shell part, run on a temporary root, exited {effect.exit_code} ({last[0][:160]}) and left no "
            "containerd drop-in with LimitMEMLOCK")


def node_view(user_data_b64: str | None) -> NodeView:
    memlock, nofile, hugepages = AL2023_MEMLOCK, AL2023_NOFILE, 0
    if not user_data_b64:
        return NodeView(memlock, nofile, hugepages, multipart=False, has_user_data=False)
    try:
        user_data = base64.b64decode(user_data_b64, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        user_data = user_data_b64  # placeholders or unencoded text: read as it is
    multipart, parts, defects = _parts(user_data)
    note, refused = "", []
    for content_type, text in parts:
        if content_type == "text/x-shellscript":
            effect = run_shell_part(text)
            if effect.refused:
                refused.append(effect.refused)
            elif effect.memlock is not None:
                memlock = effect.memlock
            else:
                note = _shell_note(effect)
            for match in _HUGEPAGES.finditer(text):
                hugepages = int(match.group(1) or match.group(2))
        elif content_type == "application/node.eks.aws":
            for document in yaml.safe_load_all(text):
                spec = ((document or {}).get("spec") or {}).get("containerd", {}).get("baseRuntimeSpec") or {}
                for rlimit in (spec.get("process") or {}).get("rlimits") or []:
                    if rlimit.get("type") == "RLIMIT_MEMLOCK":  # the soft limit binds, as for LimitMEMLOCK=
                        memlock = min(_rlimit_value(rlimit["soft"]), _rlimit_value(rlimit["hard"]))
                    if rlimit.get("type") == "RLIMIT_NOFILE":
                        nofile = (int(rlimit["soft"]), int(rlimit["hard"]))
    return NodeView(memlock, nofile, hugepages, multipart, True, defects, note if memlock != UNLIMITED else "",
                    tuple(refused))


EFA_INTERFACE_TYPES = ("efa", "efa-only")
"""EC2 API Reference, LaunchTemplateInstanceNetworkInterfaceSpecificationRequest InterfaceType: an EFA with its ENA
(efa) or an EFA-only interface (efa-only, RDMA alone); either registers memory for the pods that use it."""


def _uses_efa(launch_template_data: dict) -> bool:
    return any(i.get("InterfaceType") in EFA_INTERFACE_TYPES for i in launch_template_data.get("NetworkInterfaces", []))


def launch_template_of(r: Resolver, nodegroup_id: str) -> tuple[str, dict] | None:
    reference = r.resources[nodegroup_id]["Properties"].get("LaunchTemplate")
    if not reference:
        return None
    target = reference.get("Id") or reference.get("Name")
    logical_id = target.get("Ref") if isinstance(target, dict) else None
    if isinstance(target, str) and "Name" in reference:  # a name: the stack's template of that LaunchTemplateName
        logical_id = next((lid for lid, res in r.resources.items() if res["Type"] == "AWS::EC2::LaunchTemplate"
                           and r.properties(lid).get("LaunchTemplateName") == target), None)
    if logical_id not in r.resources:
        return None
    return logical_id, r.properties(logical_id).get("LaunchTemplateData", {})


def _quantity_bytes(text: str) -> int:
    units = {"Ki": 1 << 10, "Mi": MIB, "Gi": 1 << 30, "K": 10**3, "M": 10**6, "G": 10**9}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor)
    return int(text)


def pod_specs(manifests: list[dict]) -> list[dict]:
    """Every pod template a RayJob creates (head, worker groups, submitter) and any plain Pod."""
    found = []
    for m in manifests:
        if m.get("kind") == "RayJob":
            spec = m["spec"].get("rayClusterSpec") or {}
            groups = [spec.get("headGroupSpec") or {}] + list(spec.get("workerGroupSpecs") or [])
            found += [g["template"]["spec"] for g in groups if "template" in g]
            if m["spec"].get("submitterPodTemplate"):
                found.append(m["spec"]["submitterPodTemplate"]["spec"])
        elif m.get("kind") == "Pod":
            found.append(m["spec"])
    return found


def hugepage_problems(r: Resolver, manifests: list[dict]) -> list[str]:
    """A pod's hugepages-2Mi request is only schedulable on a node that reserved that many huge pages
    (Kubernetes docs, "Manage HugePages": huge pages must be pre-allocated on the node)."""
    found = []
    for lid, resource in r.resources.items():
        if resource["Type"] != "AWS::EKS::Nodegroup":
            continue
        labels = r.properties(lid).get("Labels") or {}
        template = launch_template_of(r, lid)
        reserved = node_view(template[1].get("UserData") if template else None).hugepages_2mi * 2 * MIB
        for spec in pod_specs(manifests):
            selector = spec.get("nodeSelector") or {}
            if not selector or any(labels.get(k) != v for k, v in selector.items()):
                continue
            wanted = sum(_quantity_bytes(c.get("resources", {}).get("limits", {}).get("hugepages-2Mi", "0"))
                         for c in spec.get("containers", []))
            if wanted > reserved:
                found.append(f"node: {lid}: a pod for it asks {wanted // MIB} MiB of hugepages-2Mi, the node reserves "
                             f"{reserved // MIB} MiB (no vm.nr_hugepages in its user data)")
    return found


def problems(r: Resolver, manifests: list[dict] | None = None) -> list[str]:
    found = hugepage_problems(r, manifests or [])
    for lid, resource in r.resources.items():
        if resource["Type"] != "AWS::EKS::Nodegroup":
            continue
        template = launch_template_of(r, lid)
        if template is None:
            continue
        template_id, data = template
        view = node_view(data.get("UserData"))
        if view.has_user_data and not view.multipart:
            found.append(f"node: {lid}: launch template {template_id}'s user data is not MIME multi-part, "
                         "which EKS requires of a managed node group's launch template")
        if view.mime_defects:
            found.append(f"node: {lid}: launch template {template_id}'s user data is malformed MIME "
                         f"({', '.join(view.mime_defects)}): cloud-init may drop or misread its parts (RFC 2046 5.1.1)")
        for token in view.refused:
            found.append(f"node: {lid}: launch template {template_id}'s shell part is not run on this machine: "
                         f"{token!r} could write outside the fake node's temporary root (absolute paths allowed: "
                         f"/{', /'.join(fake_node.MOVED)}, /dev/null; no '..', no ~user)")
        if _uses_efa(data) and view.memlock != UNLIMITED and not view.refused:
            found.append(f"node: {lid}: EFA pods need an unlimited memlock, a container gets "
                         f"{view.memlock / MIB:g} MiB (AL2023's default; no containerd LimitMEMLOCK drop-in in "
                         f"launch template {template_id}'s user data{view.shell_note})")
    return found
