-- Retention: receipts and rule outcomes are pruned by age in small batches
-- (`prune_receipts`, `prune_outcomes`), which these indexes keep cheap.

CREATE INDEX injection_receipts_by_age ON injection_receipts (created_at);
CREATE INDEX rule_outcomes_by_age ON rule_outcomes (recorded_at);
