"""decide's line where every rank passes: the verdict of a rank whose traffic crosses nodes, not the first rank's
(which may hold only single-node communicators)."""

from training.transport import RankReport, decide

SINGLE = "single node: no inter-node traffic; intra-node P2P"
ON_EFA = "inter-node traffic on EFA in all 2 multi-node communicators"


def test_the_line_is_a_spanning_ranks_verdict():
    reports = [RankReport(0, "node-a", "/logs/0", True, False, SINGLE), RankReport(1, "node-b", "/logs/1", True, True, ON_EFA)]
    assert decide(reports, require_efa=True) == (True, ON_EFA)


def test_on_one_node_the_line_is_the_first_ranks():
    reports = [RankReport(0, "node-a", "/logs/0", True, False, SINGLE), RankReport(1, "node-a", "/logs/1", True, False, SINGLE)]
    assert decide(reports, require_efa=True) == (True, SINGLE)
