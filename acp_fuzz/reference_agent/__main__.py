"""``python -m acp_fuzz.reference_agent [--bug NAME]``: run the reference agent on stdio."""

from .agent import main

raise SystemExit(main())
