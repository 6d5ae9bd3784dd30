"""Lesson 04's helpers: ``primitives`` (the rank workers: every primitive on values that name
their rank and chunk, a ring built from sends and receives, NCCL's crossed-exchange deadlock),
``costs`` (the α-β model of each primitive, ring against tree, the fit of α and β) and
``sweep`` (send/recv and all-reduce over message sizes, measured in interleaved rounds)."""
