"""Lesson 16's helpers: collectives on live ranks, their α-β costs, and a link measured here.

* ``primitives``: the rank workers: every primitive on small integer tensors whose values name
  their rank and chunk, a ring reduce-scatter and all-gather built from sends and receives, and
  the crossed exchange that NCCL's point-to-point rules turn into a deadlock;
* ``costs``: the α-β model (``t = α + n / β``) of each primitive, ring against tree all-reduce,
  the links of ``ppdit.analysis.hardware`` with an assumed α each, and the fit of α and β;
* ``sweep``: the 2-rank measurement of send/recv and all-reduce over message sizes, in
  interleaved rounds.
"""
