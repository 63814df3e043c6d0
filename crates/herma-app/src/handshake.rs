//! Remote handshake sync (H07): pull context entries from a remote Herma-compatible endpoint
//! (`GET {remote}/v1/context`, paged) into the caller's own scope, with `max_chars` clamped to
//! `HERMA_HANDSHAKE_MAX_CHARS` and every cut recorded.

use herma_core::handshake::{Cut, HandshakeRequest, check_remote, clamp_max_chars, fit};
use herma_core::json;
use herma_core::model::{ContextEntrySpec, ContextKind};
use herma_core::{Problem, ProblemCode};
use herma_store::DocumentStoreExt;
use serde::Serialize;
use serde_json::Value;

use herma_core::gate::Principal;

use crate::App;
use crate::records::{Partition, Upserted, own_scope, upsert};

/// Pages read from a remote at most.
const MAX_PAGES: usize = 100;
const PAGE_BYTES: usize = 8 << 20;

/// An entry the handshake did not write, and why.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct HandshakeRefusal {
    pub id: String,
    pub reason: String,
}

/// What a handshake did.
#[derive(Clone, Debug, Default, Serialize, utoipa::ToSchema)]
pub struct HandshakeReport {
    pub remote: String,
    /// The limit that applied (the caller's ask, clamped to the operator's ceiling).
    pub max_chars: u64,
    pub pulled: u32,
    pub created: u32,
    pub updated: u32,
    pub unchanged: u32,
    /// Entries cut to `max_chars`.
    pub cuts: Vec<Cut>,
    pub refused: Vec<HandshakeRefusal>,
    /// Set when the remote stopped answering after some entries were written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

fn remote_problem(detail: String) -> Problem {
    Problem::new(
        ProblemCode::UpstreamUnreachable,
        format!("the remote could not be read: {detail}"),
    )
}

/// A remote listing item as a context entry spec (the record's own fields only).
fn entry_of(item: &Value, remote: &str) -> Result<ContextEntrySpec, String> {
    let id = item["id"]
        .as_str()
        .ok_or("an item without an `id`")?
        .to_owned();
    let kind: ContextKind =
        serde_json::from_value(item["kind"].clone()).map_err(|_| "an unknown `kind`")?;
    let tags = match &item["tags"] {
        Value::Null => Vec::new(),
        other => serde_json::from_value(other.clone()).map_err(|_| "`tags` is not a list")?,
    };
    // A remote's governance claims are not taken on trust (Herma never verified them): a
    // handshake brings the caller's own, ungoverned entries.
    Ok(ContextEntrySpec {
        uri: Some(format!("{remote}/v1/context/{id}")),
        id,
        kind,
        title: item["title"].as_str().unwrap_or_default().to_owned(),
        schema_or_body: item["schema_or_body"].clone(),
        tags,
        fabric_governance: None,
    })
}

impl App {
    /// Pulls the remote's context entries into the principal's own scope.
    pub async fn handshake(
        &self,
        principal: &Principal,
        request: HandshakeRequest,
    ) -> Result<HandshakeReport, Problem> {
        let scope = own_scope(principal)?;
        let remote = check_remote(&request.remote, &self.settings.upstream.allowed_hosts)?;
        let base = remote.as_str().trim_end_matches('/').to_owned();
        let max_chars = clamp_max_chars(request.max_chars, self.settings.handshake_max_chars);
        let client = self
            .fabric(&base, request.remote_key.as_deref())
            .map_err(remote_problem)?;
        let mut report = HandshakeReport {
            remote: base.clone(),
            max_chars,
            ..HandshakeReport::default()
        };
        let mut after: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut query = vec![("limit", "100")];
            if let Some(a) = &after {
                query.push(("after", a.as_str()));
            }
            let page = match client.get_path("/v1/context", &query, PAGE_BYTES).await {
                Ok(bytes) => json::parse_strict(&bytes)
                    .map_err(|p| format!("its listing is not JSON: {}", p.detail)),
                Err(e) => Err(e),
            };
            let items = match page.as_ref().map(|p| p["items"].as_array()) {
                Ok(Some(items)) => items.clone(),
                Ok(None) => Vec::new(),
                Err(_) => Vec::new(),
            };
            let failure = match &page {
                Err(e) => Some(e.clone()),
                Ok(p) if p["items"].as_array().is_none() => {
                    Some("its listing has no `items`".to_owned())
                }
                Ok(_) => None,
            };
            if let Some(why) = failure {
                if report.pulled == 0 {
                    return Err(remote_problem(why));
                }
                // Entries already written stay; say where it stopped.
                report.stopped = Some(format!("the remote could not be read further: {why}"));
                break;
            }
            let page = page.unwrap_or_default();
            for item in &items {
                let id = item["id"].as_str().unwrap_or("(no id)").to_owned();
                if !request.ids.is_empty() && !request.ids.contains(&id) {
                    continue;
                }
                report.pulled += 1;
                let mut spec = match entry_of(item, &base) {
                    Ok(spec) => spec,
                    Err(reason) => {
                        report.refused.push(HandshakeRefusal {
                            id,
                            reason: reason.to_owned(),
                        });
                        continue;
                    }
                };
                match fit(&mut spec, max_chars) {
                    Ok(Some(cut)) => report.cuts.push(cut),
                    Ok(None) => {}
                    Err(reason) => {
                        report.refused.push(HandshakeRefusal { id, reason });
                        continue;
                    }
                }
                if let Err(p) = spec.validate() {
                    report.refused.push(HandshakeRefusal {
                        id,
                        reason: p.detail,
                    });
                    continue;
                }
                // The same rule as writing through the API: a built-in's id is not taken over.
                if let Err(p) = self
                    .write_scope::<ContextEntrySpec>(principal, Partition::Own, &spec.id)
                    .await
                {
                    report.refused.push(HandshakeRefusal {
                        id,
                        reason: p.detail,
                    });
                    continue;
                }
                let same_remote = |old: &ContextEntrySpec| {
                    if old.uri == spec.uri {
                        Ok(())
                    } else {
                        Err(
                            "an entry of this id exists and did not come from this remote"
                                .to_owned(),
                        )
                    }
                };
                let known = match self.store.context_entries().get(scope, &id).await {
                    Ok(known) => known,
                    Err(err) => {
                        report.refused.push(HandshakeRefusal {
                            id,
                            reason: err.to_string(),
                        });
                        continue;
                    }
                };
                let replaced =
                    known.map(|old| serde_json::to_vec(&old.spec).map_or(0, |b| b.len() as u64));
                if let Err(p) = self.within_quota(scope, &spec, replaced).await {
                    report.refused.push(HandshakeRefusal {
                        id,
                        reason: p.detail,
                    });
                    continue;
                }
                match upsert(
                    self.store.context_entries(),
                    scope,
                    &spec,
                    self.clock.now(),
                    same_remote,
                )
                .await
                {
                    Ok(Upserted::Created) => report.created += 1,
                    Ok(Upserted::Updated) => report.updated += 1,
                    Ok(Upserted::Unchanged) => report.unchanged += 1,
                    Err(reason) => report.refused.push(HandshakeRefusal { id, reason }),
                }
            }
            match page["next_after"].as_str() {
                Some(next) if !items.is_empty() => after = Some(next.to_owned()),
                _ => break,
            }
        }
        self.rules.invalidate(scope);
        Ok(report)
    }
}
