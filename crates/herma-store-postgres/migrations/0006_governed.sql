-- The governed single-call engine: journal, results, usage inbox, governed costs and the spend
-- counters they move, audit, operation roots with their calls and receipts. Times are Unix ms;
-- bodies are compact JSON text.

CREATE TABLE governed_executions (
    caller_scope  TEXT COLLATE "C" NOT NULL,
    operation_key TEXT COLLATE "C" NOT NULL,
    version       BIGINT NOT NULL CHECK (version >= 1),
    status        TEXT NOT NULL,
    cause         TEXT,
    deadline_at   BIGINT NOT NULL,
    lease_until   BIGINT,
    fence         BIGINT NOT NULL,
    meta          TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL,
    PRIMARY KEY (caller_scope, operation_key)
);
CREATE INDEX governed_executions_overdue ON governed_executions (caller_scope, deadline_at)
    WHERE status IN ('prepared', 'dispatching');

CREATE TABLE governed_results (
    caller_scope  TEXT COLLATE "C" NOT NULL,
    operation_key TEXT COLLATE "C" NOT NULL,
    expires_at    BIGINT NOT NULL,
    envelope      TEXT,
    erased_at     BIGINT,
    created_at    BIGINT NOT NULL,
    PRIMARY KEY (caller_scope, operation_key)
);

CREATE TABLE governed_usage_inbox (
    seq             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    caller_scope    TEXT COLLATE "C" NOT NULL,
    operation_key   TEXT COLLATE "C" NOT NULL,
    observation_id  TEXT COLLATE "C" NOT NULL,
    exact           BIGINT NOT NULL,
    usage           TEXT NOT NULL,
    observed_at     BIGINT NOT NULL,
    acknowledged_at BIGINT,
    UNIQUE (caller_scope, operation_key, observation_id)
);
CREATE INDEX governed_usage_pending ON governed_usage_inbox (caller_scope, seq)
    WHERE acknowledged_at IS NULL;

CREATE TABLE governed_charges (
    caller_scope  TEXT COLLATE "C" NOT NULL,
    operation_key TEXT COLLATE "C" NOT NULL,
    session_id    TEXT NOT NULL,
    day           TEXT NOT NULL,
    amount_micros BIGINT NOT NULL,
    detail        TEXT NOT NULL,
    settled_at    BIGINT NOT NULL,
    PRIMARY KEY (caller_scope, operation_key)
);

CREATE TABLE governed_spend (
    caller_scope TEXT COLLATE "C" NOT NULL,
    counter      TEXT COLLATE "C" NOT NULL,
    micros       BIGINT NOT NULL,
    PRIMARY KEY (caller_scope, counter)
);

CREATE TABLE governed_audit (
    seq           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    caller_scope  TEXT COLLATE "C" NOT NULL,
    operation_key TEXT COLLATE "C" NOT NULL,
    kind          TEXT NOT NULL,
    detail        TEXT NOT NULL,
    at            BIGINT NOT NULL
);
CREATE INDEX governed_audit_by_call ON governed_audit (caller_scope, operation_key, seq);

CREATE TABLE governed_roots (
    caller_scope   TEXT COLLATE "C" NOT NULL,
    root_key       TEXT COLLATE "C" NOT NULL,
    binding        TEXT NOT NULL,
    status         TEXT NOT NULL,
    deadline_at    BIGINT NOT NULL,
    reserved_calls BIGINT NOT NULL,
    settled_micros BIGINT NOT NULL,
    receipts       BIGINT NOT NULL,
    created_at     BIGINT NOT NULL,
    closed_at      BIGINT,
    PRIMARY KEY (caller_scope, root_key)
);
CREATE INDEX governed_roots_active ON governed_roots (caller_scope, deadline_at)
    WHERE status = 'active';

CREATE TABLE governed_root_calls (
    caller_scope  TEXT COLLATE "C" NOT NULL,
    root_key      TEXT COLLATE "C" NOT NULL,
    operation_key TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (caller_scope, root_key, operation_key)
);

CREATE TABLE governed_root_receipts (
    caller_scope  TEXT COLLATE "C" NOT NULL,
    root_key      TEXT COLLATE "C" NOT NULL,
    operation_key TEXT COLLATE "C" NOT NULL,
    amount_micros BIGINT NOT NULL,
    detail        TEXT NOT NULL,
    recorded_at   BIGINT NOT NULL,
    PRIMARY KEY (caller_scope, root_key, operation_key)
);
