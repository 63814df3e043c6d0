//! Planning a request: evaluate the caller's rules through the three tiers, decide, apply
//! `once_per_conversation` and render the shim. Shared by the proxy (which claims) and dry
//! runs (which do not).

use std::collections::HashSet;

use herma_core::evaluation::{Evaluation, Mode};
use herma_core::model::{Action, MatchedRule};
use herma_core::rules::{Decision, RuleMatch, decide};
use herma_core::shim::{ShimEntry, render};
use herma_core::wire::{ConversationSource, Envelope};
use herma_core::{CallerScope, Problem};

use crate::App;
use crate::rule_cache::{PreparedShim, RuleSnapshot};

/// Whether planning may write `once_per_conversation` claims (the proxy) or not (dry run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claims {
    Write,
    DryRun,
}

/// What Herma will do with a request, and why.
#[derive(Debug)]
pub struct Plan {
    pub matched: Vec<MatchedRule>,
    pub action: PlannedAction,
    /// `once_per_conversation` provisions claimed for this request.
    pub claimed: Vec<String>,
    /// Tiers 2 and 3: scores, classifier outcomes and what was skipped.
    pub evaluation: Evaluation,
}

#[derive(Debug)]
pub enum PlannedAction {
    Forward,
    Respond {
        provision_id: String,
        text: String,
    },
    /// The shim, its JSON string (ready to splice) and the refs that did not resolve.
    Shim(PreparedShim),
}

impl App {
    /// Plans the action for `envelope` under `snapshot`: evaluates, decides, applies
    /// `once_per_conversation` (claiming when `claims` is `Write`) and renders the shim.
    ///
    /// Only rules that can take effect are considered: a shim rule needs a place for the shim
    /// in this request, a resolvable context entry and a usable upstream (`can_forward`, asked
    /// only when a shim rule matched). Claims are taken only for rules that will apply: the
    /// highest-priority match is settled first (a spent once-only rule steps aside for the
    /// next), then, when it is a shim, the other once-only shims are claimed together; dropping
    /// those cannot change the decision.
    pub async fn plan(
        &self,
        scope: &CallerScope,
        snapshot: &RuleSnapshot,
        envelope: &Envelope,
        claims: Claims,
        can_forward: impl FnOnce() -> bool,
    ) -> Result<Plan, Problem> {
        let rules = &snapshot.rules;
        let spec = |m: &RuleMatch| &rules.rule(m.rule).provision.spec;
        let mode = match claims {
            Claims::Write => Mode::Online,
            Claims::DryRun => Mode::Offline,
        };
        let (all, evaluation) =
            crate::tiers::evaluate(&self.tiers, rules, &snapshot.semantic, envelope, mode).await;
        self.metrics.record_tiers(&evaluation);
        // Asked only when a shim rule matched: finding where a request would go is work a
        // direct answer does not need.
        let mut can_forward = Some(can_forward);
        let mut shims_possible = None;
        let mut shims_possible = || {
            *shims_possible.get_or_insert_with(|| {
                envelope.insertion.is_some() && can_forward.take().is_some_and(|f| f())
            })
        };
        // What deciding reads of a match is its rule (and through it the spec); `matched`
        // below comes from `all`. So the candidates go without their trigger texts, which
        // each clone of them (here, per `decide`, for the deciding match) would copy.
        let mut remaining: Vec<RuleMatch> = all
            .iter()
            .filter(|m| match spec(m).action {
                Action::RespondDirectly => true,
                Action::ShimContext => {
                    shims_possible()
                        && spec(m)
                            .context_refs
                            .iter()
                            .any(|r| snapshot.context_entry(r).is_some())
                }
            })
            .map(|m| RuleMatch {
                rule: m.rule,
                triggers: Vec::new(),
                tier: m.tier,
                score: m.score,
                confidence: m.confidence,
            })
            .collect();
        let writes =
            claims == Claims::Write && envelope.conversation.source != ConversationSource::None;
        let conversation = envelope.conversation.id.as_str();
        let mut claimed: Vec<String> = Vec::new();
        let decision = loop {
            let decision = decide(rules, remaining.clone());
            let first = match &decision {
                Decision::Forward => break decision,
                Decision::Respond(m) => m.clone(),
                Decision::Shim(ms) => match ms.first() {
                    Some(m) => m.clone(),
                    None => break Decision::Forward,
                },
            };
            // The deciding match first: a spent once-only rule steps aside for the next.
            if writes && spec(&first).once_per_conversation {
                let id = spec(&first).id.clone();
                let won = self
                    .store
                    .claim_once(
                        scope,
                        conversation,
                        std::slice::from_ref(&id),
                        self.clock.now(),
                    )
                    .await
                    .map_err(crate::error::internal)?;
                if won.is_empty() {
                    remaining.retain(|m| m.rule != first.rule);
                    continue;
                }
                claimed.push(id);
            }
            let Decision::Shim(mut shims) = decision else {
                break decision;
            };
            // The other once-only shims together: dropping any cannot change the decision.
            let wanted: Vec<String> = shims
                .iter()
                .skip(1)
                .filter(|m| writes && spec(m).once_per_conversation)
                .map(|m| spec(m).id.clone())
                .collect();
            if !wanted.is_empty() {
                let won = self
                    .store
                    .claim_once(scope, conversation, &wanted, self.clock.now())
                    .await
                    .map_err(crate::error::internal)?;
                shims.retain(|m| {
                    m.rule == first.rule
                        || !spec(m).once_per_conversation
                        || won.contains(&spec(m).id)
                });
                claimed.extend(won);
            }
            break Decision::Shim(shims);
        };

        // A handful at most: a list is cheaper than hashing.
        let applied_ids: Vec<usize> = match &decision {
            Decision::Forward => Vec::new(),
            Decision::Respond(m) => vec![m.rule],
            Decision::Shim(ms) => ms.iter().map(|m| m.rule).collect(),
        };
        let matched = all
            .iter()
            .map(|m| {
                let rule = rules.rule(m.rule);
                MatchedRule {
                    provision_id: rule.provision.spec.id.clone(),
                    version: rule.provision.version,
                    builtin: rule.builtin,
                    tier: m.tier,
                    trigger: m.trigger(),
                    applied: applied_ids.contains(&m.rule),
                    score: m.score,
                    confidence: m.confidence,
                }
            })
            .collect();
        let action = match decision {
            Decision::Forward => PlannedAction::Forward,
            Decision::Respond(m) => PlannedAction::Respond {
                provision_id: spec(&m).id.clone(),
                text: spec(&m)
                    .response
                    .as_ref()
                    .map(|r| r.text.clone())
                    .unwrap_or_default(),
            },
            Decision::Shim(ms) => {
                let budget = usize::try_from(self.settings.shim_max_chars).unwrap_or(usize::MAX);
                // `applied_ids` are `ms`'s rules in order: what the rendering depends on,
                // with the snapshot's entries.
                let shim = snapshot.shims.get_or_render(&applied_ids, budget, || {
                    let mut seen: HashSet<&str> = HashSet::new();
                    let mut entries = Vec::new();
                    let mut unresolved = Vec::new();
                    for m in &ms {
                        for r in &spec(m).context_refs {
                            if !seen.insert(r.as_str()) {
                                continue;
                            }
                            match snapshot.context_entry(r) {
                                Some((entry, builtin)) => {
                                    entries.push(ShimEntry { entry, builtin });
                                }
                                None => unresolved.push(r.clone()),
                            }
                        }
                    }
                    (render(&entries, budget), unresolved)
                });
                PlannedAction::Shim(shim)
            }
        };
        Ok(Plan {
            matched,
            action,
            claimed,
            evaluation,
        })
    }
}
