-- How many working entities each caller lost to the per-caller bound.
CREATE TABLE entity_evictions (
    caller_scope TEXT COLLATE "C" PRIMARY KEY,
    evicted      BIGINT NOT NULL
);

-- Attribution looks up the rules fired in one turn of one conversation.
CREATE INDEX rule_outcomes_by_turn ON rule_outcomes (caller_scope, conversation_id, turn);
