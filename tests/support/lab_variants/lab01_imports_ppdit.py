"""Lab 01 gone wrong: no split written at all — the whole file is ppdit's own splitter, the very
answer key the checker compares with. Every comparison holds; only the own-work rule can tell."""

from ppdit.parallel.step_split.plan import split_steps

__all__ = ["split_steps"]
