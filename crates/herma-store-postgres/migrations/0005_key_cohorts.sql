-- Cohorts a key's caller belongs to (a JSON list of names), for cohort-scoped governed records.
ALTER TABLE harness_keys ADD COLUMN cohorts TEXT NOT NULL DEFAULT '[]';
