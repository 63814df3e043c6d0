-- Semantic triggers' example vectors: one row per (caller, provision, model), holding the
-- vectors of the provision version they were computed for (f32 little-endian, one vector after
-- another). Rows of another model are simply never read.
CREATE TABLE rule_vectors (
    caller_scope      TEXT NOT NULL,
    provision_id      TEXT NOT NULL,
    model_id          TEXT NOT NULL,
    provision_version BIGINT NOT NULL,
    dimensions        BIGINT NOT NULL,
    examples          BLOB NOT NULL,
    negatives         BLOB NOT NULL,
    computed_at       BIGINT NOT NULL,
    PRIMARY KEY (caller_scope, provision_id, model_id)
) WITHOUT ROWID;
