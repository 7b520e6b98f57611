"""The one story every checkpoint case and crash trial tells: Lucy's shop restocks vanilla.

A leaf module, so the worker process, the parent and the instructor guide name the same facts.
"""

OPERATOR = "lucy"  # who approves the order
SUBJECT = "SKU-VANILLA"  # what is restocked
PROMPT = "Restock vanilla to its reorder level"
APPROVAL_SECONDS = 600  # how long Lucy's approval stays valid
