"""Helpers only the tests (and benchmarks) use: network namespaces, diffusers' context
parallelism as a reference, workers that ranks import by name."""
