-- Herma's initial schema (SQLite). Times are Unix milliseconds; bodies are compact JSON text.

CREATE TABLE harness_keys (
    key_id       TEXT PRIMARY KEY,
    caller_scope TEXT NOT NULL,
    scopes       TEXT NOT NULL,
    harness      TEXT,
    label        TEXT NOT NULL DEFAULT '',
    digest       TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    revoked_at   INTEGER
);

CREATE TABLE provisions (
    caller_scope TEXT NOT NULL,
    id           TEXT NOT NULL,
    version      INTEGER NOT NULL CHECK (version >= 1),
    body         TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (caller_scope, id)
) WITHOUT ROWID;

CREATE TABLE context_entries (
    caller_scope TEXT NOT NULL,
    id           TEXT NOT NULL,
    version      INTEGER NOT NULL CHECK (version >= 1),
    body         TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (caller_scope, id)
) WITHOUT ROWID;

CREATE TABLE injection_receipts (
    caller_scope TEXT NOT NULL,
    id           TEXT NOT NULL,
    sha256       TEXT NOT NULL,
    body         TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (caller_scope, id)
) WITHOUT ROWID;

CREATE TABLE working_entities (
    caller_scope TEXT NOT NULL,
    project_tag  TEXT NOT NULL,
    kind         TEXT NOT NULL,
    value        TEXT NOT NULL,
    count        INTEGER NOT NULL,
    first_seen   INTEGER NOT NULL,
    last_seen    INTEGER NOT NULL,
    PRIMARY KEY (caller_scope, project_tag, kind, value)
);

CREATE INDEX working_entities_eviction
    ON working_entities (caller_scope, count, last_seen, project_tag, kind, value);

CREATE TABLE rule_outcomes (
    seq               INTEGER PRIMARY KEY AUTOINCREMENT,
    caller_scope      TEXT NOT NULL,
    conversation_id   TEXT NOT NULL,
    turn              INTEGER NOT NULL,
    provision_id      TEXT NOT NULL,
    provision_version INTEGER NOT NULL,
    outcome           TEXT NOT NULL,
    error_signature   TEXT,
    receipt_id        TEXT,
    recorded_at       INTEGER NOT NULL
);

CREATE INDEX rule_outcomes_by_scope ON rule_outcomes (caller_scope, seq);
