"""``trace_report(collectives="if_whole")``: all-reduces counted only for a function that traces
as one graph (what keeps lesson 05's TP comparison cheap), on one process."""

import torch

from ppdit.parallel.tensor.comms import trace_report


def _whole(x):
    return torch.sin(x) * 2


def _broken(x):
    y = torch.sin(x)
    torch._dynamo.graph_break()
    return y * 2


def test_if_whole_counts_a_single_graph():
    report = trace_report(_whole, torch.ones(4), collectives="if_whole")
    assert report.graph_break_count == 0 and report.graph_all_reduces == 0


def test_if_whole_skips_a_broken_function():
    report = trace_report(_broken, torch.ones(4), collectives="if_whole")
    assert report.graph_break_count == 1 and report.graph_all_reduces is None
    assert trace_report(_broken, torch.ones(4)).graph_all_reduces == 0  # default: counted
