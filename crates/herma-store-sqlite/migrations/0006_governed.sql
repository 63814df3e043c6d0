-- The governed single-call engine: journal, results, usage inbox, governed costs and the spend
-- counters they move, audit, operation roots with their calls and receipts. Times are Unix ms;
-- bodies are compact JSON text.

CREATE TABLE governed_executions (
    caller_scope  TEXT NOT NULL,
    operation_key TEXT NOT NULL,
    version       INTEGER NOT NULL CHECK (version >= 1),
    status        TEXT NOT NULL,
    cause         TEXT,
    deadline_at   INTEGER NOT NULL,
    lease_until   INTEGER,
    fence         INTEGER NOT NULL,
    meta          TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    PRIMARY KEY (caller_scope, operation_key)
);
CREATE INDEX governed_executions_overdue ON governed_executions (caller_scope, deadline_at)
    WHERE status IN ('prepared', 'dispatching');

CREATE TABLE governed_results (
    caller_scope  TEXT NOT NULL,
    operation_key TEXT NOT NULL,
    expires_at    INTEGER NOT NULL,
    envelope      TEXT,
    erased_at     INTEGER,
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (caller_scope, operation_key)
);

CREATE TABLE governed_usage_inbox (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    caller_scope    TEXT NOT NULL,
    operation_key   TEXT NOT NULL,
    observation_id  TEXT NOT NULL,
    exact           INTEGER NOT NULL,
    usage           TEXT NOT NULL,
    observed_at     INTEGER NOT NULL,
    acknowledged_at INTEGER,
    UNIQUE (caller_scope, operation_key, observation_id)
);
CREATE INDEX governed_usage_pending ON governed_usage_inbox (caller_scope, seq)
    WHERE acknowledged_at IS NULL;

CREATE TABLE governed_charges (
    caller_scope  TEXT NOT NULL,
    operation_key TEXT NOT NULL,
    session_id    TEXT NOT NULL,
    day           TEXT NOT NULL,
    amount_micros INTEGER NOT NULL,
    detail        TEXT NOT NULL,
    settled_at    INTEGER NOT NULL,
    PRIMARY KEY (caller_scope, operation_key)
);

CREATE TABLE governed_spend (
    caller_scope TEXT NOT NULL,
    counter      TEXT NOT NULL,
    micros       INTEGER NOT NULL,
    PRIMARY KEY (caller_scope, counter)
);

CREATE TABLE governed_audit (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    caller_scope  TEXT NOT NULL,
    operation_key TEXT NOT NULL,
    kind          TEXT NOT NULL,
    detail        TEXT NOT NULL,
    at            INTEGER NOT NULL
);
CREATE INDEX governed_audit_by_call ON governed_audit (caller_scope, operation_key, seq);

CREATE TABLE governed_roots (
    caller_scope   TEXT NOT NULL,
    root_key       TEXT NOT NULL,
    binding        TEXT NOT NULL,
    status         TEXT NOT NULL,
    deadline_at    INTEGER NOT NULL,
    reserved_calls INTEGER NOT NULL,
    settled_micros INTEGER NOT NULL,
    receipts       INTEGER NOT NULL,
    created_at     INTEGER NOT NULL,
    closed_at      INTEGER,
    PRIMARY KEY (caller_scope, root_key)
);
CREATE INDEX governed_roots_active ON governed_roots (caller_scope, deadline_at)
    WHERE status = 'active';

CREATE TABLE governed_root_calls (
    caller_scope  TEXT NOT NULL,
    root_key      TEXT NOT NULL,
    operation_key TEXT NOT NULL,
    PRIMARY KEY (caller_scope, root_key, operation_key)
);

CREATE TABLE governed_root_receipts (
    caller_scope  TEXT NOT NULL,
    root_key      TEXT NOT NULL,
    operation_key TEXT NOT NULL,
    amount_micros INTEGER NOT NULL,
    detail        TEXT NOT NULL,
    recorded_at   INTEGER NOT NULL,
    PRIMARY KEY (caller_scope, root_key, operation_key)
);
