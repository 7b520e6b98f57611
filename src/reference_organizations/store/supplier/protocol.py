"""What both ends of the supplier protocol agree on."""

import re

DEFAULT_IDENTITY = "lucy-wholesale"
# An operation id: the shop's deterministic order id, 32 lowercase hex characters.
OPERATION = re.compile(r"[0-9a-f]{32}")
BUSY_TIMEOUT_SECONDS = 10.0
