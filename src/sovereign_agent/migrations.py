"""The schema, as forward-only migrations. Each entry is applied once, in one transaction.

Never edit a released entry: append a new one. `Database` records progress in `user_version`.
"""

_CONTROL = """
CREATE TABLE assistant_control(
    id INTEGER PRIMARY KEY CHECK (id = 1),
    epoch TEXT NOT NULL CHECK (length(epoch) = 32 AND epoch NOT GLOB '*[^0-9a-f]*'),
    paused INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1))
)"""

_EVENTS = """
CREATE TABLE events(
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL CHECK (length(kind) BETWEEN 1 AND 100),
    payload TEXT NOT NULL CHECK (json_valid(payload)),
    created_at REAL NOT NULL
)"""

_EVENTS_APPEND_ONLY = [
    """CREATE TRIGGER events_no_update BEFORE UPDATE ON events
       BEGIN SELECT RAISE(ABORT, 'events are append-only'); END""",
    """CREATE TRIGGER events_no_delete BEFORE DELETE ON events
       BEGIN SELECT RAISE(ABORT, 'events are append-only'); END""",
]

# Immutable columns describe the assignment; mutable ones describe its current holder.
_WORK = """
CREATE TABLE assistant_work(
    id TEXT PRIMARY KEY,
    origin TEXT NOT NULL UNIQUE,
    session TEXT NOT NULL,
    prompt TEXT NOT NULL,
    subject TEXT NOT NULL DEFAULT '',
    role TEXT NOT NULL DEFAULT 'shop',
    status TEXT NOT NULL DEFAULT 'READY'
        CHECK (status IN ('READY', 'RUNNING', 'DONE', 'BLOCKED', 'CANCELLED')),
    owner TEXT,
    generation INTEGER NOT NULL DEFAULT 0 CHECK (generation >= 0),
    expires REAL,
    available_after REAL NOT NULL DEFAULT 0,
    control INTEGER NOT NULL DEFAULT 0 CHECK (control IN (0, 1)),
    cancelled INTEGER NOT NULL DEFAULT 0 CHECK (cancelled IN (0, 1)),
    created REAL NOT NULL,
    result TEXT,
    CHECK (status <> 'RUNNING' OR (owner IS NOT NULL AND expires IS NOT NULL))
)"""

_WORK_RULES = [
    """CREATE TRIGGER work_assignment_immutable
       BEFORE UPDATE OF origin, session, prompt, subject, role ON assistant_work
       WHEN NEW.origin IS NOT OLD.origin OR NEW.session IS NOT OLD.session
         OR NEW.prompt IS NOT OLD.prompt OR NEW.subject IS NOT OLD.subject
         OR NEW.role IS NOT OLD.role
       BEGIN SELECT RAISE(ABORT, 'assignment fields are immutable'); END""",
    """CREATE TRIGGER work_generation_increases
       BEFORE UPDATE OF generation ON assistant_work
       WHEN NEW.generation < OLD.generation
       BEGIN SELECT RAISE(ABORT, 'generation never decreases'); END""",
    # The claim query walks this index in its ORDER BY order: no sort, no scan of finished work.
    """CREATE INDEX work_queue ON assistant_work(role, control DESC, created)
       WHERE status IN ('READY', 'RUNNING')""",
    # The session check ("another live holder in this session?") is one probe of this index.
    """CREATE INDEX work_live_sessions ON assistant_work(session, expires)
       WHERE status = 'RUNNING'""",
]

_TRANSCRIPT = """
CREATE TABLE assistant_transcript(
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    work_id TEXT NOT NULL REFERENCES assistant_work(id),
    generation INTEGER NOT NULL CHECK (generation >= 1),
    message TEXT NOT NULL CHECK (json_valid(message))
)"""

_MODEL_CALLS = """
CREATE TABLE assistant_model_calls(
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    work_id TEXT NOT NULL REFERENCES assistant_work(id),
    generation INTEGER NOT NULL,
    estimate INTEGER NOT NULL CHECK (estimate > 0),
    created REAL NOT NULL
)"""

_DELEGATIONS = """
CREATE TABLE assistant_delegations(
    work_id TEXT PRIMARY KEY REFERENCES assistant_work(id),
    parent_id TEXT NOT NULL REFERENCES assistant_work(id),
    deadline REAL NOT NULL
)"""

# The account ceiling: reserved + spent can never pass the limit, whatever the sessions do.
_SPENDING = """
CREATE TABLE assistant_spending(
    id INTEGER PRIMARY KEY CHECK (id = 1),
    limit_pence INTEGER NOT NULL CHECK (limit_pence >= 0),
    reserved_pence INTEGER NOT NULL DEFAULT 0 CHECK (reserved_pence >= 0),
    spent_pence INTEGER NOT NULL DEFAULT 0 CHECK (spent_pence >= 0),
    CHECK (reserved_pence + spent_pence <= limit_pence)
)"""

_ORDERS = """
CREATE TABLE assistant_orders(
    id TEXT PRIMARY KEY CHECK (length(id) = 32 AND id NOT GLOB '*[^0-9a-f]*'),
    work_id TEXT NOT NULL REFERENCES assistant_work(id),
    proposal TEXT NOT NULL CHECK (json_valid(proposal)),
    digest TEXT NOT NULL,
    amount INTEGER NOT NULL CHECK (amount > 0),
    status TEXT NOT NULL DEFAULT 'DRAFT' CHECK (status IN
        ('DRAFT', 'APPROVED', 'SENDING', 'UNKNOWN', 'CONFIRMED', 'REJECTED', 'REVOKED')),
    approved_by TEXT,
    approved_until REAL,
    revoked INTEGER NOT NULL DEFAULT 0 CHECK (revoked IN (0, 1)),
    receipt TEXT CHECK (receipt IS NULL OR json_valid(receipt)),
    target TEXT NOT NULL,
    created REAL NOT NULL
)"""

_ORDER_RULES = [
    "CREATE INDEX orders_by_work ON assistant_orders(work_id, status)",
    """CREATE INDEX orders_uncertain ON assistant_orders(work_id)
       WHERE status IN ('SENDING', 'UNKNOWN')""",
]

# Lucy's shop: the catalogue the offline model reasons about.
_SHOP = """
CREATE TABLE shop_items(
    sku TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    on_hand INTEGER NOT NULL CHECK (on_hand >= 0),
    reorder_at INTEGER NOT NULL CHECK (reorder_at >= 0),
    unit_pence INTEGER NOT NULL CHECK (unit_pence > 0)
)"""

_CASH = """
CREATE TABLE shop_cash(
    id INTEGER PRIMARY KEY CHECK (id = 1),
    pence INTEGER NOT NULL
)"""

# Which process holds a claim (sovereign_agent.processes): evidence for the status report only.
_PROCESSES = """
CREATE TABLE assistant_processes(
    owner TEXT PRIMARY KEY CHECK (length(owner) BETWEEN 1 AND 200),
    host TEXT NOT NULL,
    boot TEXT NOT NULL,
    pid INTEGER NOT NULL CHECK (pid > 0),
    started TEXT NOT NULL
)"""

MIGRATIONS: list[list[str]] = [
    [
        _CONTROL,
        _EVENTS,
        *_EVENTS_APPEND_ONLY,
        _WORK,
        *_WORK_RULES,
        _TRANSCRIPT,
        _MODEL_CALLS,
        _DELEGATIONS,
        _SPENDING,
        _ORDERS,
        *_ORDER_RULES,
        _SHOP,
        _CASH,
    ],
    [_PROCESSES],
]
