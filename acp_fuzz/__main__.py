"""``python -m acp_fuzz`` is the ``acp-fuzz`` command."""

import sys

from acp_fuzz.cli import main

sys.exit(main())
