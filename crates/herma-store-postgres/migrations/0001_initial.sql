-- Herma's initial schema (PostgreSQL). Times are Unix milliseconds; bodies are compact JSON text
-- (kept as written, so key order survives). Identifiers use the "C" collation so ordering is
-- byte order, the same as SQLite and the in-memory store.

CREATE TABLE harness_keys (
    key_id       TEXT COLLATE "C" PRIMARY KEY,
    caller_scope TEXT COLLATE "C" NOT NULL,
    scopes       TEXT NOT NULL,
    harness      TEXT,
    label        TEXT NOT NULL DEFAULT '',
    digest       TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    revoked_at   BIGINT
);

CREATE TABLE provisions (
    caller_scope TEXT COLLATE "C" NOT NULL,
    id           TEXT COLLATE "C" NOT NULL,
    version      BIGINT NOT NULL CHECK (version >= 1),
    body         TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL,
    PRIMARY KEY (caller_scope, id)
);

CREATE TABLE context_entries (
    caller_scope TEXT COLLATE "C" NOT NULL,
    id           TEXT COLLATE "C" NOT NULL,
    version      BIGINT NOT NULL CHECK (version >= 1),
    body         TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL,
    PRIMARY KEY (caller_scope, id)
);

CREATE TABLE injection_receipts (
    caller_scope TEXT COLLATE "C" NOT NULL,
    id           TEXT COLLATE "C" NOT NULL,
    sha256       TEXT NOT NULL,
    body         TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (caller_scope, id)
);

CREATE TABLE working_entities (
    caller_scope TEXT COLLATE "C" NOT NULL,
    project_tag  TEXT COLLATE "C" NOT NULL,
    kind         TEXT COLLATE "C" NOT NULL,
    value        TEXT COLLATE "C" NOT NULL,
    count        BIGINT NOT NULL,
    first_seen   BIGINT NOT NULL,
    last_seen    BIGINT NOT NULL,
    PRIMARY KEY (caller_scope, project_tag, kind, value)
);

CREATE INDEX working_entities_eviction
    ON working_entities (caller_scope, count, last_seen, project_tag, kind, value);

CREATE TABLE rule_outcomes (
    seq               BIGSERIAL PRIMARY KEY,
    caller_scope      TEXT COLLATE "C" NOT NULL,
    conversation_id   TEXT NOT NULL,
    turn              BIGINT NOT NULL,
    provision_id      TEXT NOT NULL,
    provision_version BIGINT NOT NULL,
    outcome           TEXT NOT NULL,
    error_signature   TEXT,
    receipt_id        TEXT,
    recorded_at       BIGINT NOT NULL
);

CREATE INDEX rule_outcomes_by_scope ON rule_outcomes (caller_scope, seq);
