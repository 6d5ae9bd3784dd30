"""Decode overlapped with generation: ``plan``, ``ranks`` (generator and decoder), ``run``.

Why its order is safe under NCCL: chunks go from the generator to the decoder on the default
group, credits come back on a group of their own, so the decoder's chunk receives posted ahead
never stand in front of a credit the generator waits for."""
