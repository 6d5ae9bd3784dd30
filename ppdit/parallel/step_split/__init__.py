"""Step-split pipeline parallelism: ``plan`` (splits and the plan), ``ranks`` (a stage's loop),
``run`` (entry points and single-device references)."""
