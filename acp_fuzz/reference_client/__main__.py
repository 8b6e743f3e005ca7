"""``python -m acp_fuzz.reference_client [--bug NAME] [COMMAND]``: run the reference client."""

from .client import main

raise SystemExit(main())
