"""Decode overlapped with generation: ``plan``, ``ranks`` (generator and decoder), ``run``."""
