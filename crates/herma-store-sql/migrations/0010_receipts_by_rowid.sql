-- Receipts kept by rowid instead of clustered by their key. In SQLite (and D1) a WITHOUT ROWID
-- table keeps at most about a quarter of a page of a row in the B-tree, so a receipt that
-- matched rules and shimmed context (1 KB and more of JSON) took a 4 KB overflow page of its
-- own: three times the file and the write time per receipt (docs/performance.md). A rowid table
-- keeps rows of up to a page inline and appends time-ordered receipts at its end; the key stays
-- unique through its index. PostgreSQL has no clustered tables: there this only copies the rows.

CREATE TABLE injection_receipts_by_rowid (
    caller_scope {key_text} NOT NULL,
    id           {key_text} NOT NULL,
    sha256       TEXT NOT NULL,
    body         TEXT NOT NULL,
    created_at   {integer} NOT NULL,
    PRIMARY KEY (caller_scope, id)
);

INSERT INTO injection_receipts_by_rowid (caller_scope, id, sha256, body, created_at)
    SELECT caller_scope, id, sha256, body, created_at FROM injection_receipts ORDER BY created_at, id;

DROP TABLE injection_receipts;

ALTER TABLE injection_receipts_by_rowid RENAME TO injection_receipts;

CREATE INDEX injection_receipts_by_age ON injection_receipts (created_at);
