"""Reference solution of lab 07.

The whole clock follows from one fact read off ``ppdit.parallel.step_split.ranks``: a stage
posts its send (``FrameSender.send`` returns once the send is posted) and goes straight on to its
next request. A hop therefore delays the request that travels, never the stage that sent it.
With equal stages, request r starts stage s at

    start(s, r) = s·(stage_s + hop_s) + r·stage_s

by induction on s: stage s is free again at s·(stage_s + hop_s) + r·stage_s (it finished
request r − 1 then) and request r arrives from stage s − 1 at exactly the same moment. Neither
waits for the other once the pipeline is full.
"""

from __future__ import annotations

import math

EPS = 1e-9  # relative slack for a ratio that lands on an integer only up to rounding


def makespan(num_requests: int, num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    """The last request leaves the last stage at start(P − 1, R − 1) + stage_s: P − 1 stage-
    times and hops to fill, then R stage-times streaming out of the last stage."""
    _check(num_requests, num_stages, stage_s, hop_s)
    return (num_stages - 1) * (stage_s + hop_s) + num_requests * stage_s


def throughput(num_requests: int, num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    """R requests over the makespan."""
    return num_requests / makespan(num_requests, num_stages, stage_s, hop_s)


def steady_throughput(num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    """R / ((P − 1)(stage_s + hop_s) + R·stage_s) tends to 1 / stage_s: the fill is paid once,
    and a hop costs latency, not stage time, so neither P nor hop_s changes a full pipeline's
    rate (while hop_s <= stage_s: see the handout's Going further)."""
    _check(1, num_stages, stage_s, hop_s)
    return 1.0 / stage_s


def in_flight(num_requests: int, num_stages: int, stage_s: float, hop_s: float = 0.0) -> float:
    """L = λ W, with W the mean of each request's own time inside.

    Request r enters when stage 0 starts it, at start(0, r), and leaves when the last stage
    finishes it, at start(P − 1, r) + stage_s. Subtract: r·stage_s cancels, so every request
    spends the same P·stage_s + (P − 1)·hop_s inside, and that is W: the fill is spent by
    idle stages, not by waiting requests. The makespan is longer than that by the R − 1
    stage-times between the first exit and the last, which is why it is not the latency.
    """
    latency = num_stages * stage_s + (num_stages - 1) * hop_s  # the same for every request
    return throughput(num_requests, num_stages, stage_s, hop_s) * latency


def requests_for(fraction: float, num_stages: int) -> int:
    """Without hops, throughput / steady = R / (R + P − 1) >= f  ⇔  R >= f (P − 1) / (1 − f).

    The ratio only approaches 1, so f = 1 (or more) is never reached, and f <= 0 asks for
    nothing; both are errors. The bound is often an integer in exact arithmetic (f = 0.9, P = 2
    gives 9) that floating point lands just above (9.000000000000002): a plain ceil would ask for
    one request too many, hence the slack.
    """
    if not 0 < fraction < 1:
        raise ValueError(f"fraction={fraction} must lie strictly between 0 and 1: the share "
                         "R / (R + P - 1) of the steady rate that R requests reach stays "
                         "below 1 (for P > 1), and 0 asks for nothing")
    _check(1, num_stages, 1.0, 0.0)
    need = fraction * (num_stages - 1) / (1 - fraction)
    return max(1, math.ceil(need * (1 - EPS)))


def _check(num_requests: int, num_stages: int, stage_s: float, hop_s: float) -> None:
    if num_requests < 1 or num_stages < 1 or stage_s <= 0 or hop_s < 0:
        raise ValueError(f"need R >= 1, P >= 1, stage_s > 0 and hop_s >= 0, got R="
                         f"{num_requests}, P={num_stages}, stage_s={stage_s}, hop_s={hop_s}")
