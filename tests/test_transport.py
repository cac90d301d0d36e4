"""NCCL transport verdicts on real logs (tests/data/nccl, from a 2-GPU run) and on written ones."""

from __future__ import annotations

import json

import pytest

from training.transport import judge_files, main, parse_log
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
