"""What NCCL really used, read from NCCL_DEBUG=INFO logs, and whether that was EFA.

    python -m training.transport [--require-efa] LOGFILE...

"Using network X" names the network plugin even on one NVLink box, so the verdict rests on
each communicator's channel lines ("via P2P/CUMEM", "via NET/Socket/0", "via NET/Libfabric/0")
and on aws-ofi-nccl's "Selected provider is efa"; "nNodes N" says whether a communicator
spans nodes. A communicator that does not span nodes needs no network and always passes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

_COMM = re.compile(r"comm (0x[0-9a-f]+) rank (\d+) nRanks (\d+) nNodes (\d+)", re.I)
_NETWORK = re.compile(r"Using network (.+?)\s*$")
_PROVIDER = re.compile(r"Selected provider is (\w+)", re.I)
_VIA = re.compile(r"via (\S+(?: Libfabric)?\S*)")


@dataclass
class Communicator:
    comm: str
    nranks: int
    nnodes: int
    network: str | None = None
    provider: str | None = None
    intra_node: set[str] = field(default_factory=set)
    inter_node: set[str] = field(default_factory=set)

    @property
    def spans_nodes(self) -> bool:
        return self.nnodes > 1

    def inter_node_transport(self) -> str | None:
        """efa, libfabric-<provider>, socket, ib, or None when nothing went between nodes."""
        kinds = self.inter_node or ({_net_kind(self.network)} if self.spans_nodes and self.network else set())
        named = set()
        for kind in kinds:
            if kind == "libfabric":
                provider = (self.provider or "unknown").lower()
                named.add("efa" if provider == "efa" else f"libfabric-{provider}")
            else:
                named.add(kind)
        return "+".join(sorted(named)) if named else None


def _net_kind(text: str) -> str:
    lower = text.lower()
    if "libfabric" in lower or "ofi" in lower:
        return "libfabric"
    if "socket" in lower:
        return "socket"
    if lower.startswith("ib"):
        return "ib"
    return lower


def _channel_kind(via: str) -> tuple[bool, str]:
    """(is_network, kind) of a channel's transport such as P2P/CUMEM or NET/Socket/0."""
    if via.upper().startswith(("NET/", "COLLNET/")):
        return True, _net_kind(via.split("/", 1)[1])
    return False, via.split("/")[0].upper()


def parse_log(text: str) -> list[Communicator]:
    comms: dict[str, Communicator] = {}
    current: Communicator | None = None
    network = provider = None
    for line in text.splitlines():
        if m := _NETWORK.search(line):
            network = m.group(1)
        if m := _PROVIDER.search(line):
            provider = m.group(1)
        if m := _COMM.search(line):
            current = comms.setdefault(m.group(1), Communicator(m.group(1), int(m.group(3)), int(m.group(4))))
            current.network = current.network or network
        if current is not None:
            current.provider = current.provider or provider
            if " via " in line and "Channel" in line:
                is_net, kind = _channel_kind(_VIA.search(line).group(1))
                (current.inter_node if is_net else current.intra_node).add(kind)
    return list(comms.values())


@dataclass
class Verdict:
    ok: bool
    line: str
    communicators: list[dict]


def judge(communicators: list[Communicator], require_efa: bool) -> Verdict:
    spanning = [c for c in communicators if c.spans_nodes]
    bad = [c for c in spanning if c.inter_node_transport() != "efa"]
    summary = [
        {**{k: v for k, v in asdict(c).items() if k not in ("intra_node", "inter_node")},
         "intra_node": sorted(c.intra_node), "inter_node": c.inter_node_transport()}
        for c in communicators
    ]
    if not communicators:
        return Verdict(not require_efa, "no NCCL communicator found in the logs (is NCCL_DEBUG=INFO set?)", summary)
    if all(c.nranks == 1 for c in communicators):
        return Verdict(True, "one rank: no NCCL traffic", summary)
    if not spanning:
        intra = sorted(set().union(*(c.intra_node for c in communicators))) or ["none logged"]
        return Verdict(True, f"single node: no inter-node traffic; intra-node {'+'.join(intra)}", summary)
    if bad:
        used = sorted({c.inter_node_transport() or "unknown" for c in bad})
        line = f"inter-node traffic NOT on EFA: {', '.join(used)} in {len(bad)} of {len(spanning)} multi-node communicators"
        return Verdict(not require_efa, line, summary)
    return Verdict(True, f"inter-node traffic on EFA in all {len(spanning)} multi-node communicators", summary)


def judge_files(paths: list[str | Path], require_efa: bool) -> Verdict:
    comms: list[Communicator] = []
    for path in paths:
        comms.extend(parse_log(Path(path).read_text(errors="replace")))
    return judge(comms, require_efa)


@dataclass(frozen=True)
class RankReport:
    """What one training rank found in its own NCCL log (None: it wrote none)."""

    rank: int
    node: str
    log: str | None
    on_efa: bool = False
    """Every communicator of this rank that spans nodes uses EFA (vacuously true on one node)."""
    spans_nodes: bool = False
    line: str = ""


def rank_report(rank: int, node: str, log_path: str | Path | None) -> RankReport:
    if log_path is None:
        return RankReport(rank, node, None)
    communicators = parse_log(Path(log_path).read_text(errors="replace"))
    verdict = judge(communicators, require_efa=True)
    return RankReport(rank, node, str(log_path), verdict.ok, any(c.spans_nodes for c in communicators), verdict.line)


def decide(reports: list[RankReport], require_efa: bool) -> tuple[bool, str]:
    """(may the run go on, one line why) from every rank's report.

    With --require-efa, only proof passes: a rank without a log, a rank whose multi-node traffic is
    not on EFA, or workers on several nodes with no communicator that spans them all fail. Without
    it, the run goes on and the line says what is known.
    """
    nodes = sorted({r.node for r in reports})
    missing = [r for r in reports if r.log is None]
    if missing:
        ranks = ", ".join(str(r.rank) for r in missing[:8]) + (", ..." if len(missing) > 8 else "")
        hosts = ", ".join(sorted({r.node for r in missing}))
        return not require_efa, (f"no NCCL log from {len(missing)} of {len(reports)} ranks (ranks {ranks} on {hosts}): "
                                 "the inter-node transport cannot be verified")
    not_efa = [r for r in reports if not r.on_efa]
    if not_efa:
        return not require_efa, f"rank {not_efa[0].rank} on {not_efa[0].node}: {not_efa[0].line}"
    spanning = [r for r in reports if r.spans_nodes]
    if len(nodes) > 1 and not spanning:
        return not require_efa, (f"workers run on {len(nodes)} nodes, but no NCCL communicator in the logs spans "
                                 "nodes: the inter-node transport cannot be verified")
    return True, (spanning or reports)[0].line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.transport", description=__doc__.split("\n\n")[0])
    parser.add_argument("--require-efa", action="store_true", help="exit 1 unless every multi-node communicator uses EFA")
    parser.add_argument("logs", nargs="+", help="NCCL_DEBUG=INFO log files (NCCL_DEBUG_FILE output)")
    args = parser.parse_args(argv)
    missing = [p for p in args.logs if not Path(p).is_file()]
    if missing:
        print(f"error: LOGFILE: no such file: {missing[0]}", file=sys.stderr)
        return 2
    verdict = judge_files(args.logs, args.require_efa)
    print(("PASS: " if verdict.ok else "FAIL: ") + verdict.line)
    print(json.dumps({"ok": verdict.ok, "verdict": verdict.line, "communicators": verdict.communicators}, indent=1))
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
