"""NCCL transport verdicts on real logs (tests/data/nccl, from a 2-GPU run) and on written ones."""

from __future__ import annotations

import json

import pytest

from training.transport import Communicator, RankReport, decide, judge, judge_files, main, parse_log, rank_report
from tests.conftest import DATA

NVLINK = DATA / "nccl" / "one-node-2gpu-nvlink.rank0.log"
SOCKET = DATA / "nccl" / "one-node-2gpu-socket-forced.rank0.log"


def two_node_log(network: str, provider: str | None, via: str) -> str:
    prefix = "gpu-node-1:211:211 [0] NCCL INFO "
    lines = [f"{prefix}NET/Plugin: Loaded net plugin {network}"]
    if provider:
        lines.append(f"{prefix}NET/OFI Selected provider is {provider}, fabric is {provider}-direct (found 1 nics)")
    lines += [
        f"{prefix}Using network {network}",
        f"{prefix}comm 0x5aa1 rank 0 nRanks 8 nNodes 2 localRanks 4 localRank 0 MNNVL 0",
        f"{prefix}Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
        f"{prefix}Channel 00/0 : 4[0] -> 0[0] [receive] via {via}",
        f"{prefix}Channel 00/0 : 0[0] -> 4[0] [send] via {via}",
    ]
    return "\n".join(lines) + "\n"


def write(tmp_path, text: str):
    path = tmp_path / "nccl.gpu-node-1.211.log"
    path.write_text(text)
    return path


def test_real_nvlink_log_is_single_node_and_passes_require_efa():
    verdict = judge_files([NVLINK], require_efa=True)
    assert verdict.ok and verdict.line.startswith("single node")
    assert verdict.communicators[0]["intra_node"] == ["P2P"]


def test_real_nvlink_log_says_using_network_socket_but_is_not_judged_by_it():
    [comm] = parse_log(NVLINK.read_text())
    assert comm.network == "Socket" and comm.inter_node_transport() is None


def test_real_socket_forced_log_fails_require_efa():
    verdict = judge_files([SOCKET], require_efa=True)
    assert not verdict.ok and "NOT on EFA: socket" in verdict.line


def test_socket_log_passes_without_require_efa_but_reports_it():
    verdict = judge_files([SOCKET], require_efa=False)
    assert verdict.ok and "socket" in verdict.line


@pytest.mark.parametrize("network,provider,via", [
    ("Libfabric", "efa", "NET/Libfabric/0/GDRDMA"),
    ("AWS Libfabric", "efa", "NET/AWS Libfabric/0"),
    ("Libfabric", "EFA", "NET/Libfabric/0"),
])
def test_efa_logs_pass(tmp_path, network, provider, via):
    verdict = judge_files([write(tmp_path, two_node_log(network, provider, via))], require_efa=True)
    assert verdict.ok and "on EFA" in verdict.line


def test_libfabric_with_tcp_provider_fails(tmp_path):
    verdict = judge_files([write(tmp_path, two_node_log("Libfabric", "tcp", "NET/Libfabric/0"))], require_efa=True)
    assert not verdict.ok and "libfabric-tcp" in verdict.line


def test_socket_fallback_between_nodes_fails(tmp_path):
    verdict = judge_files([write(tmp_path, two_node_log("Socket", None, "NET/Socket/0"))], require_efa=True)
    assert not verdict.ok and "socket" in verdict.line


def test_cli_exit_codes_and_json(tmp_path, capsys):
    assert main(["--require-efa", str(SOCKET)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("FAIL: inter-node traffic NOT on EFA")
    summary = json.loads("\n".join(out[1:]))
    assert summary["communicators"][0]["nnodes"] == 2
    assert main(["--require-efa", str(NVLINK)]) == 0


def test_cli_missing_file(tmp_path, capsys):
    assert main([str(tmp_path / "nope.log")]) == 2
    assert "error: LOGFILE: no such file" in capsys.readouterr().err


def test_single_rank_communicator_has_no_traffic_to_judge(tmp_path):
    prefix = "gpu-node-1:211:211 [0] NCCL INFO "
    path = write(tmp_path, f"{prefix}Using network Socket\n{prefix}comm 0x5aa1 rank 0 nRanks 1 nNodes 1 localRanks 1 localRank 0 MNNVL 0\n")
    verdict = judge_files([path], require_efa=True)
    assert verdict.ok and verdict.line == "one rank: no NCCL traffic"


# ------------------------------------------------------------------ the run's decision from every rank


def rank(tmp_path, number: int, node: str, text: str | None) -> RankReport:
    if text is None:
        return rank_report(number, node, None)
    path = tmp_path / f"{node}.{number}.log"
    path.write_text(text)
    return rank_report(number, node, path)


EFA = two_node_log("Libfabric", "efa", "NET/Libfabric/0")
SOCKETS = two_node_log("Socket", None, "NET/Socket/0")


# (per rank: node and log text or None for no log, require_efa, may go on, a fragment of the line)
DECISIONS = {
    "two nodes on EFA": ([("a", EFA), ("b", EFA)], True, True, "inter-node traffic on EFA"),
    "two nodes on sockets": ([("a", SOCKETS), ("b", SOCKETS)], True, False, "NOT on EFA: socket"),
    "one rank on sockets": ([("a", EFA), ("b", SOCKETS)], True, False, "rank 1 on b: inter-node traffic NOT on EFA"),
    "sockets without require-efa": ([("a", SOCKETS), ("b", SOCKETS)], False, True, "NOT on EFA"),
    "workers left no logs": ([("a", None), ("b", None)], True, False, "no NCCL log from 2 of 2 ranks (ranks 0, 1 on a, b)"),
    "one worker node left none": ([("a", EFA), ("b", None)], True, False, "no NCCL log from 1 of 2 ranks (ranks 1 on b)"),
    "no logs without require-efa": ([("a", None), ("b", None)], False, True, "cannot be verified"),
    "one node, logs present": ([("a", NVLINK.read_text()), ("a", NVLINK.read_text())], True, True, "single node"),
    "one node, no logs": ([("a", None)], True, False, "no NCCL log from 1 of 1 ranks"),
    "two nodes but no communicator spans them": ([("a", NVLINK.read_text()), ("b", NVLINK.read_text())], True, False,
                                                 "workers run on 2 nodes, but no NCCL communicator in the logs spans nodes"),
    "logs without any communicator": ([("a", "NCCL INFO Bootstrap\n"), ("b", "NCCL INFO Bootstrap\n")], True, False,
                                      "no NCCL communicator found"),
}


@pytest.mark.parametrize("case", DECISIONS)
def test_decision(tmp_path, case):
    ranks, require_efa, ok, fragment = DECISIONS[case]
    reports = [rank(tmp_path, i, node, text) for i, (node, text) in enumerate(ranks)]
    decided, line = decide(reports, require_efa)
    assert decided is ok and fragment in line, line


def test_socket_forced_real_log_fails_as_one_rank_of_a_run(tmp_path):
    decided, line = decide([rank_report(0, "a", SOCKET), rank(tmp_path, 1, "b", EFA)], require_efa=True)
    assert not decided and line.startswith("rank 0 on a: inter-node traffic NOT on EFA: socket")


def test_no_communicator_in_the_logs_fails_only_when_efa_is_required(tmp_path):
    path = write(tmp_path, "gpu-node-1:211:211 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n")
    required = judge_files([path], require_efa=True)
    assert not required.ok and required.line.startswith("no NCCL communicator found in the logs")
    assert judge_files([path], require_efa=False).ok


def test_infiniband_between_nodes_is_not_efa(tmp_path):
    verdict = judge_files([write(tmp_path, two_node_log("IB", None, "NET/IB/0/GDRDMA"))], require_efa=True)
    assert not verdict.ok and "NOT on EFA: ib in 1 of 1" in verdict.line


# ------------------------------------------------------------------ exact readings


@pytest.mark.parametrize("text,kind", [
    ("Libfabric", "libfabric"), ("aws-ofi-nccl", "libfabric"), ("OFI", "libfabric"), ("Socket", "socket"),
    ("SOCKET/0", "socket"), ("IB", "ib"), ("IBext_v8", "ib"), ("gIB/0", "gib/0"), ("Foo", "foo"),
])
def test_network_names(text, kind):
    from training.transport import _net_kind

    assert _net_kind(text) == kind


@pytest.mark.parametrize("via,reading", [
    ("NET/Socket/0", (True, "socket")), ("net/Libfabric/0", (True, "libfabric")), ("COLLNET/IB", (True, "ib")),
    ("collnet/x", (True, "x")), ("NET/Foo/0", (True, "foo/0")), ("P2P/CUMEM", (False, "P2P")), ("shm/direct", (False, "SHM")),
])
def test_channel_transports(via, reading):
    from training.transport import _channel_kind

    assert _channel_kind(via) == reading


def test_a_communicator_reads_in_full(tmp_path):
    [comm] = parse_log(two_node_log("Libfabric", "efa", "NET/Libfabric/0"))
    assert (comm.comm, comm.nranks, comm.nnodes, comm.network, comm.provider) == ("0x5aa1", 8, 2, "Libfabric", "efa")
    assert comm.intra_node == {"P2P"} and comm.inter_node == {"libfabric"} and comm.inter_node_transport() == "efa"
    verdict = judge_files([write(tmp_path, two_node_log("Libfabric", "efa", "NET/Libfabric/0"))], require_efa=True)
    assert verdict.communicators == [{"comm": "0x5aa1", "nranks": 8, "nnodes": 2, "network": "Libfabric", "provider": "efa",
                                      "intra_node": ["P2P"], "inter_node": "efa"}]
    assert verdict.line == "inter-node traffic on EFA in all 1 multi-node communicators"


def test_without_channel_lines_the_network_names_the_transport():
    from training.transport import Communicator

    assert Communicator("c", 8, 2, network="Libfabric").inter_node_transport() == "libfabric-unknown"
    assert Communicator("c", 8, 2, network="Libfabric", provider="tcp").inter_node_transport() == "libfabric-tcp"
    assert Communicator("c", 8, 2, network="Socket").inter_node_transport() == "socket"
    assert Communicator("c", 8, 1, network="Socket").inter_node_transport() is None
    assert Communicator("c", 8, 2, inter_node={"socket", "ib"}).inter_node_transport() == "ib+socket"


def test_exact_lines_of_the_other_verdicts(tmp_path):
    none = judge_files([write(tmp_path, "NCCL INFO Bootstrap\n")], require_efa=True)
    assert (none.ok, none.line, none.communicators) == (False, "no NCCL communicator found in the logs (is NCCL_DEBUG=INFO set?)", [])
    single = judge_files([NVLINK], require_efa=True)
    assert single.line == "single node: no inter-node traffic; intra-node P2P"
    prefix = "n:1:1 [0] NCCL INFO "
    quiet = write(tmp_path, f"{prefix}comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0\n")
    assert judge_files([quiet], require_efa=True).line == "single node: no inter-node traffic; intra-node none logged"
    sockets = judge_files([write(tmp_path, SOCKETS)], require_efa=False)
    assert (sockets.ok, sockets.line) == (True, "inter-node traffic NOT on EFA: socket in 1 of 1 multi-node communicators")


def test_a_log_with_bytes_that_are_not_utf8_is_still_read(tmp_path):
    path = tmp_path / "nccl.log"
    path.write_bytes(EFA.encode() + b"\xff\xfe garbage\n")
    assert judge_files([path], require_efa=True).ok
    assert rank_report(3, "node-a", path) == RankReport(3, "node-a", str(path), True, True,
                                                        "inter-node traffic on EFA in all 1 multi-node communicators")


def test_many_ranks_without_a_log_are_listed_to_eight():
    reports = [RankReport(r, f"n{r // 4}", None) for r in range(9)]
    ok, line = decide(reports, require_efa=True)
    assert not ok and line == ("no NCCL log from 9 of 9 ranks (ranks 0, 1, 2, 3, 4, 5, 6, 7, ... on n0, n1, n2): "
                               "the inter-node transport cannot be verified")
    ok, line = decide(reports[:8], require_efa=True)
    assert line.startswith("no NCCL log from 8 of 8 ranks (ranks 0, 1, 2, 3, 4, 5, 6, 7 on n0, n1)")


def test_the_cli_help_says_what_it_does(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit):
        main(["--help"])
    lines = [line.strip() for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert lines == [
        "usage: python -m training.transport [-h] [--require-efa] logs [logs ...]",
        "What NCCL really used, read from NCCL_DEBUG=INFO logs, and whether that was EFA.",
        "positional arguments:", "logs           NCCL_DEBUG=INFO log files (NCCL_DEBUG_FILE output)",
        "options:", "-h, --help     show this help message and exit",
        "--require-efa  exit 1 unless every multi-node communicator uses EFA"]


def test_the_cli_prints_the_verdict_then_the_communicators_as_indented_json(capsys):
    assert main([str(NVLINK)]) == 0
    out = capsys.readouterr().out
    verdict = judge_files([NVLINK], require_efa=False)
    assert out == (f"PASS: {verdict.line}\n"
                   + json.dumps({"ok": True, "verdict": verdict.line, "communicators": verdict.communicators}, indent=1) + "\n")


def test_two_communicators_in_one_log_are_kept_apart():
    prefix = "n:1:1 [0] NCCL INFO "
    log = (f"{prefix}comm 0xa rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0\n"
           f"{prefix}Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0\n"
           f"{prefix}comm 0xb rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0\n"
           f"{prefix}Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n")
    first, second = parse_log(log)
    assert (first.comm, first.nnodes, first.inter_node, first.intra_node, first.network, first.provider) == (
        "0xa", 2, {"socket"}, set(), None, None)
    assert (second.comm, second.nnodes, second.inter_node, second.intra_node) == ("0xb", 1, set(), {"P2P"})


def test_verdict_lines_join_every_transport_they_name(tmp_path):
    prefix = "n:1:1 [0] NCCL INFO "
    intra = write(tmp_path, f"{prefix}comm 0x1 rank 0 nRanks 4 nNodes 1 localRanks 4 localRank 0 MNNVL 0\n"
                            f"{prefix}Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n"
                            f"{prefix}Channel 01/0 : 0[0] -> 2[2] via SHM/direct/direct\n")
    assert judge_files([intra], require_efa=True).line == "single node: no inter-node traffic; intra-node P2P+SHM"
    bad = write(tmp_path, f"{prefix}comm 0x2 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0\n"
                          f"{prefix}Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0\n"
                          f"{prefix}comm 0x3 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0\n"
                          f"{prefix}Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0\n")
    assert judge_files([bad], require_efa=False).line == "inter-node traffic NOT on EFA: ib, socket in 2 of 2 multi-node communicators"


def test_one_rank_verdict_keeps_its_communicator(tmp_path):
    prefix = "n:1:1 [0] NCCL INFO "
    one = judge_files([write(tmp_path, f"{prefix}comm 0x9 rank 0 nRanks 1 nNodes 1 localRanks 1 localRank 0 MNNVL 0\n")], True)
    assert (one.ok, one.line, one.communicators) == (True, "one rank: no NCCL traffic", [
        {"comm": "0x9", "nranks": 1, "nnodes": 1, "network": None, "provider": None, "intra_node": [], "inter_node": None}])


def test_a_passing_decision_quotes_the_first_multi_node_rank():
    reports = [RankReport(0, "a", "l0", True, True, "first"), RankReport(1, "b", "l1", True, True, "second")]
    assert decide(reports, require_efa=True) == (True, "first")


def test_a_multi_node_communicator_that_names_no_transport_is_unknown(tmp_path):
    prefix = "n:1:1 [0] NCCL INFO "
    log = write(tmp_path, f"{prefix}comm 0x4 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0\n")
    verdict = judge_files([log], require_efa=True)
    assert (verdict.ok, verdict.line) == (False, "inter-node traffic NOT on EFA: unknown in 1 of 1 multi-node communicators")


def test_a_single_rank_communicator_does_not_excuse_the_others():
    """HSDP on one GPU per node makes 1-rank shard groups beside the 2-node replicate group: NCCL logs both.
    Only a run whose every communicator has one rank moves nothing; here 16 ranks cross 2 nodes on sockets."""
    lonely = Communicator("0x1", 1, 1)
    spanning = Communicator("0x2", 16, 2, network="Socket")
    verdict = judge([lonely, spanning], require_efa=True)
    assert not verdict.ok
    assert verdict.line == "inter-node traffic NOT on EFA: socket in 1 of 1 multi-node communicators"
    assert judge([lonely, Communicator("0x3", 1, 1)], require_efa=True).line == "one rank: no NCCL traffic"
