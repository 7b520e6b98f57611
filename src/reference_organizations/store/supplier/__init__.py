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

from importlib import import_module

# Loaded on first use: the shop's agent needs only the protocol, and a process that never calls the
# supplier (each grading learner process) should not pay for http.client, http.server and ssl.
_HOME = {"DEFAULT_IDENTITY": "protocol", "SupplierClient": "client", "SupplierProcess": "process",
         "start_supplier": "process", "main": "server"}
__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
