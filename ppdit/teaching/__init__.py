"""What the lessons and labs need beyond the library: ``claims`` (the ledger of claims from the
reference documents and what the notebooks measured) and ``labkit`` (loading a student's file)."""
