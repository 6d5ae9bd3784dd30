"""``python -m ppdit ...``: see ``ppdit.cli``."""

import sys

from ppdit._spawn_entry import watch_torchrun_agent

watch_torchrun_agent()  # before any heavy import: an agent killed meanwhile ends this rank

from ppdit.cli import main  # noqa: E402

sys.exit(main())
