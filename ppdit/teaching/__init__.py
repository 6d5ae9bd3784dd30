"""What the lessons and labs need beyond the library: the ``claims`` ledger, ``labkit``
(loading a student's file), ``collectives`` (lesson 04), ``profiling`` (a ``torch.profiler``
trace of one step), ``quote`` (numbers with their spread), ``placement`` (where a lesson's
ranks compute; references compared only on their device), ``demos`` (small rank jobs the
lessons launch) and failures to show safely (``hangs``: a hang caught by its timeout,
``drill``: a run interrupted or killed, and what it left behind)."""
