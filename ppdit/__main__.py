"""``python -m ppdit ...``: see ``ppdit.cli``."""

import sys

from ppdit.cli import main

sys.exit(main())
