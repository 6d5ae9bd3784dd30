"""``python -m ppdit ...``: see ``ppdit.cli``."""

import sys

from ppdit._fork_server import start_early
from ppdit._spawn_entry import watch_torchrun_agent

watch_torchrun_agent()  # before any heavy import: an agent killed meanwhile ends this rank
start_early()  # the fork server's imports run beside this process's own (CPU ranks)

from ppdit.cli import main  # noqa: E402

sys.exit(main())
