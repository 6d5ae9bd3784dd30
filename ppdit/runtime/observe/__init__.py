"""What ranks record: traces, timings, peak memory (see ``ppdit.runtime``)."""
