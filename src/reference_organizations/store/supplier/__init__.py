"""Lucy's wholesaler: an independent HTTP process with its own ledger, and the client that calls it.

The supplier is a separate process on purpose: when the shop's worker crashes mid-order, the
supplier keeps whatever it committed, and only its ledger can say whether an order exists.
Every request it answers (or drops on purpose) is recorded in that ledger, so an experiment
can count retransmitted POSTs and lookups with plain sqlite3.

The server is the standard library's ThreadingHTTPServer: no extra dependency for learners,
and the whole protocol fits in one file. It listens on 127.0.0.1 only; it is a teaching
fixture, not a production web server.

    python -m reference_organizations.store.supplier --database PATH --port 0 --ready FILE
"""

from reference_organizations.store.supplier.client import SupplierClient
from reference_organizations.store.supplier.process import (
    SupplierProcess,
    start_supplier,
)
from reference_organizations.store.supplier.protocol import DEFAULT_IDENTITY
from reference_organizations.store.supplier.server import main

__all__ = ["DEFAULT_IDENTITY", "SupplierClient", "SupplierProcess", "main", "start_supplier"]
