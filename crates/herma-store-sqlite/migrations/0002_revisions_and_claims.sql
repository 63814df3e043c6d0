-- Per-scope change counters, bumped by triggers inside the very statement that changes a row,
-- so compare-and-set stays one statement and a revision can never miss a change. (No INSERT OR
-- IGNORE here: inside an upsert, SQLite applies the outer statement's conflict policy to it.)
CREATE TABLE revisions (
    caller_scope TEXT NOT NULL,
    collection   TEXT NOT NULL,
    revision     INTEGER NOT NULL,
    PRIMARY KEY (caller_scope, collection)
) WITHOUT ROWID;

CREATE TRIGGER provisions_revision_insert AFTER INSERT ON provisions BEGIN
    INSERT INTO revisions (caller_scope, collection, revision) SELECT NEW.caller_scope, 'provisions', 0
        WHERE NOT EXISTS (SELECT 1 FROM revisions WHERE caller_scope = NEW.caller_scope AND collection = 'provisions');
    UPDATE revisions SET revision = revision + 1 WHERE caller_scope = NEW.caller_scope AND collection = 'provisions';
END;
CREATE TRIGGER provisions_revision_update AFTER UPDATE ON provisions BEGIN
    INSERT INTO revisions (caller_scope, collection, revision) SELECT NEW.caller_scope, 'provisions', 0
        WHERE NOT EXISTS (SELECT 1 FROM revisions WHERE caller_scope = NEW.caller_scope AND collection = 'provisions');
    UPDATE revisions SET revision = revision + 1 WHERE caller_scope = NEW.caller_scope AND collection = 'provisions';
END;
CREATE TRIGGER provisions_revision_delete AFTER DELETE ON provisions BEGIN
    INSERT INTO revisions (caller_scope, collection, revision) SELECT OLD.caller_scope, 'provisions', 0
        WHERE NOT EXISTS (SELECT 1 FROM revisions WHERE caller_scope = OLD.caller_scope AND collection = 'provisions');
    UPDATE revisions SET revision = revision + 1 WHERE caller_scope = OLD.caller_scope AND collection = 'provisions';
END;
CREATE TRIGGER context_entries_revision_insert AFTER INSERT ON context_entries BEGIN
    INSERT INTO revisions (caller_scope, collection, revision) SELECT NEW.caller_scope, 'context_entries', 0
        WHERE NOT EXISTS (SELECT 1 FROM revisions WHERE caller_scope = NEW.caller_scope AND collection = 'context_entries');
    UPDATE revisions SET revision = revision + 1 WHERE caller_scope = NEW.caller_scope AND collection = 'context_entries';
END;
CREATE TRIGGER context_entries_revision_update AFTER UPDATE ON context_entries BEGIN
    INSERT INTO revisions (caller_scope, collection, revision) SELECT NEW.caller_scope, 'context_entries', 0
        WHERE NOT EXISTS (SELECT 1 FROM revisions WHERE caller_scope = NEW.caller_scope AND collection = 'context_entries');
    UPDATE revisions SET revision = revision + 1 WHERE caller_scope = NEW.caller_scope AND collection = 'context_entries';
END;
CREATE TRIGGER context_entries_revision_delete AFTER DELETE ON context_entries BEGIN
    INSERT INTO revisions (caller_scope, collection, revision) SELECT OLD.caller_scope, 'context_entries', 0
        WHERE NOT EXISTS (SELECT 1 FROM revisions WHERE caller_scope = OLD.caller_scope AND collection = 'context_entries');
    UPDATE revisions SET revision = revision + 1 WHERE caller_scope = OLD.caller_scope AND collection = 'context_entries';
END;

-- once_per_conversation: who already received which provision in which conversation.
CREATE TABLE conversation_claims (
    caller_scope    TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    provision_id    TEXT NOT NULL,
    claimed_at      INTEGER NOT NULL,
    PRIMARY KEY (caller_scope, conversation_id, provision_id)
) WITHOUT ROWID;
