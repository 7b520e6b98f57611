"""What both ends of the supplier protocol agree on."""

import re

DEFAULT_IDENTITY = "lucy-wholesale"
# An operation id: the shop's deterministic order id, 32 lowercase hex characters.
OPERATION = re.compile(r"[0-9a-f]{32}")
BUSY_TIMEOUT_SECONDS = 10.0
# The fencing token an order may carry (see fence.py): the sender's work id and generation.
FENCING_WORK, FENCING_GENERATION = "Fencing-Work", "Fencing-Generation"
WORK_ID = re.compile(r"[0-9A-Za-z:_.-]{1,64}")
MAX_GENERATION = 2**62
