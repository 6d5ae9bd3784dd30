"""What the lessons and labs need beyond the library: the ``claims`` ledger, ``labkit``
(loading a student's file), ``collectives`` (lesson 16), ``profiling`` (a ``torch.profiler``
trace of one step), ``quote`` (numbers with their spread) and failures to show safely."""
