"""`python -m reference_organizations.store.supplier ...` runs the supplier process."""

import sys

from reference_organizations.store.supplier.server import main

sys.exit(main())
