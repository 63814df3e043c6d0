-- How many working entities each caller lost to the per-caller bound.
CREATE TABLE entity_evictions (
    caller_scope TEXT PRIMARY KEY,
    evicted      INTEGER NOT NULL
) WITHOUT ROWID;

-- Attribution looks up the rules fired in one turn of one conversation.
CREATE INDEX rule_outcomes_by_turn ON rule_outcomes (caller_scope, conversation_id, turn);
