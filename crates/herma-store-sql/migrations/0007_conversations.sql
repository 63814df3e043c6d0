-- Typed work conversations: the conversations (kept as tombstones once expired, so an id is
-- never reused), their turns and model attempts, and the ledger of named counters that
-- reservations and admissions move within their ceilings. Times are Unix ms; bodies, records
-- and transcripts are compact JSON text; booleans are 0/1.
--
-- Only the ledger is clustered by its key (WITHOUT ROWID in SQLite): its rows are small and
-- hot. The other tables hold transcripts, responses and receipts of many kilobytes, which
-- SQLite keeps better in rowid tables.

CREATE TABLE conversations (
    caller_scope      {key_text} NOT NULL,
    conversation_id   {key_text} NOT NULL,
    version           {integer} NOT NULL CHECK (version >= 0),
    fingerprint       TEXT NOT NULL,
    transcript        TEXT,
    active_request_id TEXT,
    created_at        {integer} NOT NULL,
    expires_at        {integer} NOT NULL,
    expired           {integer} NOT NULL,
    PRIMARY KEY (caller_scope, conversation_id)
);
-- The sweeper looks for conversations past their expiry that are not tombstones yet.
CREATE INDEX conversations_expiring ON conversations (expires_at) WHERE expired = 0;

CREATE TABLE conversation_turns (
    caller_scope     {key_text} NOT NULL,
    conversation_id  {key_text} NOT NULL,
    request_id       {key_text} NOT NULL,
    input_digest     TEXT NOT NULL,
    status           TEXT NOT NULL,
    version_before   {integer} NOT NULL,
    server_exception TEXT NOT NULL,
    answer_class     {key_text},
    response         TEXT,
    created_at       {integer} NOT NULL,
    sealed_at        {integer},
    PRIMARY KEY (caller_scope, conversation_id, request_id)
);
-- The sweeper looks for turns still active long after their admission.
CREATE INDEX conversation_turns_unfinished ON conversation_turns (status, created_at);

CREATE TABLE conversation_attempts (
    caller_scope    {key_text} NOT NULL,
    conversation_id {key_text} NOT NULL,
    request_id      {key_text} NOT NULL,
    attempt         {integer} NOT NULL,
    record          TEXT NOT NULL,
    updated_at      {integer} NOT NULL,
    PRIMARY KEY (caller_scope, conversation_id, request_id, attempt)
);

CREATE TABLE conversation_ledger (
    counter {key_text} NOT NULL PRIMARY KEY,
    amount  {integer} NOT NULL CHECK (amount >= 0)
) {without_rowid};
