-- Per-scope change counters, bumped by a trigger inside the very statement that changes a row,
-- so compare-and-set stays one statement and a revision can never miss a change.
CREATE TABLE revisions (
    caller_scope TEXT COLLATE "C" NOT NULL,
    collection   TEXT COLLATE "C" NOT NULL,
    revision     BIGINT NOT NULL,
    PRIMARY KEY (caller_scope, collection)
);

CREATE FUNCTION herma_bump_revision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO revisions (caller_scope, collection, revision)
    VALUES (CASE WHEN TG_OP = 'DELETE' THEN OLD.caller_scope ELSE NEW.caller_scope END, TG_TABLE_NAME, 1)
    ON CONFLICT (caller_scope, collection) DO UPDATE SET revision = revisions.revision + 1;
    RETURN NULL;
END
$$;

CREATE TRIGGER provisions_revision AFTER INSERT OR UPDATE OR DELETE ON provisions
    FOR EACH ROW EXECUTE FUNCTION herma_bump_revision();
CREATE TRIGGER context_entries_revision AFTER INSERT OR UPDATE OR DELETE ON context_entries
    FOR EACH ROW EXECUTE FUNCTION herma_bump_revision();

-- once_per_conversation: who already received which provision in which conversation.
CREATE TABLE conversation_claims (
    caller_scope    TEXT COLLATE "C" NOT NULL,
    conversation_id TEXT COLLATE "C" NOT NULL,
    provision_id    TEXT COLLATE "C" NOT NULL,
    claimed_at      BIGINT NOT NULL,
    PRIMARY KEY (caller_scope, conversation_id, provision_id)
);
