"""What the lessons and labs need beyond the library: ``claims`` (the ledger of claims from the
reference documents and what the notebooks measured), ``labkit`` (loading a student's file),
``collectives`` (lesson 16's rank workers and cost formulas) and ``profiling`` (reading a
``torch.profiler`` trace of one step)."""
