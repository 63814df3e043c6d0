//! What memory and outcomes say about a caller's rules: fire counts, retry-error rates, rules
//! that never matched, and candidate provisions synthesized from frequent entities. Candidates
//! are suggestions only; approving one creates it through the ordinary create path.

use std::collections::{BTreeMap, BTreeSet};

use herma_core::gate::Principal;
use herma_core::memory::{RuleStats, candidate_provisions};
use herma_core::model::{Provision, ProvisionSpec, WorkingEntity};
use herma_core::{CallerScope, Problem};
use herma_store::DocumentStoreExt;
use serde::Serialize;

use crate::App;
use crate::error::internal;
use crate::records::{Partition, own_scope};

/// Entities considered when synthesizing candidates.
const CANDIDATE_ENTITY_WINDOW: u32 = 1000;

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct RuleInsight {
    pub provision_id: String,
    pub version: u64,
    pub builtin: bool,
    pub enabled: bool,
    /// Turns whose request received this rule's context.
    pub injected: u64,
    /// Turns this rule answered.
    pub responded_directly: u64,
    /// Turns after one where it fired that carried an error signature.
    pub retry_errors: u64,
    /// Turns where it matched but another rule decided (or it was once-only and spent).
    pub matched_not_applied: u64,
    /// `retry_errors` / (`injected` + `responded_directly`); 0 when it never fired.
    #[schema(example = 0.25)]
    pub retry_error_rate: f64,
}

impl RuleInsight {
    /// Turns the rule decided: injected or answered.
    pub fn fired(&self) -> u64 {
        self.injected + self.responded_directly
    }
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Insights {
    /// Every rule loaded for the caller (their own and the built-ins), most fired first.
    pub rules: Vec<RuleInsight>,
    /// Enabled rules that have never matched a request.
    pub never_matched: Vec<String>,
    /// Provisions Herma suggests from what it keeps seeing; none is active until approved
    /// (`POST /v1/insights/candidates/{id}`).
    pub candidate_provisions: Vec<ProvisionSpec>,
    /// Entities the caller lost to the per-caller memory bound.
    pub evicted_entities: u64,
    /// Turns this instance skipped because its memory queue was full.
    pub memory_skipped_turns: u64,
}

impl App {
    /// The caller's provisions and the built-ins the governance lens lets it see.
    async fn loaded_provisions(
        &self,
        principal: &Principal,
        scope: &CallerScope,
    ) -> Result<(Vec<Provision>, Vec<Provision>), Problem> {
        let provisions = self.store.provisions();
        let own = provisions.list_all(scope).await.map_err(internal)?;
        let builtins = provisions
            .list_all(&CallerScope::system_builtin())
            .await
            .map_err(internal)?
            .into_iter()
            .filter(|p| crate::records::visible_builtin(principal, &p.spec))
            .collect();
        Ok((own, builtins))
    }

    pub async fn insights(&self, principal: &Principal) -> Result<Insights, Problem> {
        let scope = own_scope(principal)?;
        let (own, builtins) = self.loaded_provisions(principal, scope).await?;
        let stats: BTreeMap<String, RuleStats> = self
            .store
            .rule_stats(scope)
            .await
            .map_err(internal)?
            .into_iter()
            .map(|s| (s.provision_id.clone(), s))
            .collect();
        let loaded: Vec<(&Provision, bool)> = own
            .iter()
            .map(|p| (p, false))
            .chain(builtins.iter().map(|p| (p, true)))
            .collect();
        let mut rules: Vec<RuleInsight> = loaded
            .iter()
            .map(|(p, builtin)| {
                let stats = stats.get(&p.spec.id).cloned().unwrap_or_else(|| RuleStats {
                    provision_id: p.spec.id.clone(),
                    ..RuleStats::default()
                });
                let fired = stats.fired();
                RuleInsight {
                    provision_id: p.spec.id.clone(),
                    version: p.version,
                    builtin: *builtin,
                    enabled: p.spec.enabled,
                    injected: stats.injected,
                    responded_directly: stats.responded_directly,
                    retry_errors: stats.retry_errors,
                    matched_not_applied: stats.matched_not_applied,
                    retry_error_rate: if fired == 0 {
                        0.0
                    } else {
                        stats.retry_errors as f64 / fired as f64
                    },
                }
            })
            .collect();
        rules.sort_by(|a, b| {
            b.fired()
                .cmp(&a.fired())
                .then(a.provision_id.cmp(&b.provision_id))
        });
        let never_matched = rules
            .iter()
            .filter(|r| r.enabled && r.fired() == 0 && r.matched_not_applied == 0)
            .map(|r| r.provision_id.clone())
            .collect();
        Ok(Insights {
            rules,
            never_matched,
            candidate_provisions: self.candidates(scope, &own, &builtins).await?,
            evicted_entities: self.store.entity_evictions(scope).await.map_err(internal)?,
            memory_skipped_turns: self.memory.as_ref().map(|m| m.dropped()).unwrap_or(0),
        })
    }

    async fn candidates(
        &self,
        scope: &CallerScope,
        own: &[Provision],
        builtins: &[Provision],
    ) -> Result<Vec<ProvisionSpec>, Problem> {
        let entities: Vec<WorkingEntity> = self
            .store
            .list_entities(scope, None, CANDIDATE_ENTITY_WINDOW)
            .await
            .map_err(internal)?;
        let existing: BTreeSet<String> = own
            .iter()
            .chain(builtins)
            .map(|p| p.spec.id.clone())
            .collect();
        Ok(candidate_provisions(&entities, &existing))
    }

    /// Creates candidate `id` as one of the caller's provisions (the ordinary create path).
    pub async fn approve_candidate(
        &self,
        principal: &Principal,
        id: &str,
    ) -> Result<Provision, Problem> {
        let scope = own_scope(principal)?;
        let (own, builtins) = self.loaded_provisions(principal, scope).await?;
        let candidate = self
            .candidates(scope, &own, &builtins)
            .await?
            .into_iter()
            .find(|c| c.id == id)
            .ok_or_else(|| Problem::not_found("candidate provision", id))?;
        let body = serde_json::to_value(&candidate)
            .map_err(|e| Problem::new(herma_core::ProblemCode::Internal, e.to_string()))?;
        self.create_record::<ProvisionSpec>(principal, Partition::Own, body)
            .await
    }
}
