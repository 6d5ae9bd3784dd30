"""Lab 07: fill a step-split pipeline on paper: its makespan with hops, its throughput, Little's
law, and how many requests it takes to get close to full speed (see README.md)."""

from __future__ import annotations


def makespan(num_requests: int, num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    """Seconds from stage 0 starting request 0 until the last stage finishes request R - 1."""
    # BEGIN YOUR SOLUTION
    raise NotImplementedError("lab 07: derive the makespan")
    # END YOUR SOLUTION


def throughput(num_requests: int, num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    """Requests per second over the whole run, fill and drain included."""
    # BEGIN YOUR SOLUTION
    raise NotImplementedError("lab 07: throughput over the makespan")
    # END YOUR SOLUTION


def steady_throughput(num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    """The limit of ``throughput`` as the number of requests grows: what a full pipeline
    delivers."""
    # BEGIN YOUR SOLUTION
    raise NotImplementedError("lab 07: what does a full pipeline deliver?")
    # END YOUR SOLUTION


def in_flight(num_requests: int, num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    """Mean number of requests inside the pipeline, by Little's law: throughput x the mean time
    from a request's entry (stage 0 starts it) to its exit (the last stage finishes it)."""
    # BEGIN YOUR SOLUTION
    raise NotImplementedError("lab 07: Little's law, one request at a time")
    # END YOUR SOLUTION


def requests_for(fraction: float, num_stages: int) -> int:
    """The fewest requests for which a hop-free pipeline's throughput reaches ``fraction`` of
    its steady throughput; ``ValueError`` unless 0 < fraction < 1."""
    # BEGIN YOUR SOLUTION
    raise NotImplementedError("lab 07: how many requests fill the pipeline?")
    # END YOUR SOLUTION
