//! The gate: authenticates requests with `hmk_` keys and the bootstrap token.
//!
//! Verified keys are cached in memory, so authenticating a request costs no database round trip;
//! a cached entry is trusted for at most `HERMA_KEY_CACHE_TTL_MS` (≤ 1000 ms), after which the
//! key is read again. A revocation therefore takes effect within one second on every instance
//! sharing the database, and immediately on the instance that revoked it.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use herma_core::gate::{
    self, GateRequest, KeyPrincipal, PresentedCredential, Principal, Requirement,
};
use herma_core::key::{KeyDigest, KeyId, PresentedKey};
use herma_core::secret::Secret;
use herma_core::{Problem, ProblemCode, Timestamp};
use herma_store::Store;

use crate::error::internal;
use herma_core::time::Clock;

/// Entries beyond this are dropped wholesale; a busy instance simply re-reads.
const MAX_CACHED_KEYS: usize = 100_000;

/// What the store said about a key id, and when. Unknown ids are cached too, so an unknown id
/// and a wrong secret for a known id cost the same (no timing oracle) and floods of made-up ids
/// do not reach the database on every request.
#[derive(Clone)]
struct CachedKey {
    /// `None` when no such key exists.
    known: Option<KnownKey>,
    fetched_at: Timestamp,
}

#[derive(Clone)]
struct KnownKey {
    digest: KeyDigest,
    principal: Arc<KeyPrincipal>,
    revoked: bool,
}

pub struct Gate {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    ttl_ms: i64,
    admin_token: Option<Secret>,
    edge_secret: Option<Secret>,
    /// Keys found in the store, by id. Hashed with foldhash (its seed not known outside the
    /// process), not std's SipHash: a request's lookup is a few hundred instructions less, and
    /// only keys the store holds are inserted, so no caller chooses what collides.
    cache: RwLock<HashMap<KeyId, CachedKey, foldhash::fast::RandomState>>,
    /// Compared against when a key id is unknown, so unknown and wrong keys cost the same.
    decoy: KeyDigest,
}

fn unauthorized() -> Problem {
    Problem::new(ProblemCode::Unauthorized, "the key is not valid")
}

impl Gate {
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        ttl_ms: u64,
        admin_token: Option<Secret>,
        edge_secret: Option<Secret>,
    ) -> Self {
        Self {
            store,
            clock,
            ttl_ms: i64::try_from(ttl_ms).unwrap_or(1000),
            admin_token,
            edge_secret,
            cache: RwLock::new(HashMap::default()),
            decoy: KeyDigest::of("hmk_0000000000000000_decoy"),
        }
    }

    /// H08 (edge part): with an edge secret configured, only traffic carrying it is served.
    pub fn check_edge(&self, x_edge_auth: Option<&str>) -> Result<(), Problem> {
        gate::check_edge(self.edge_secret.as_ref(), x_edge_auth)
    }

    /// Who is calling: refuses browser navigation and cookie auth (H01), then verifies the
    /// credential. Failures never reveal whether a key id exists.
    pub async fn authenticate(&self, req: &GateRequest<'_>) -> Result<Principal, Problem> {
        gate::refuse_browser(req)?;
        match gate::presented_credential(req)? {
            PresentedCredential::Token(token) => match &self.admin_token {
                Some(expected) if gate::secrets_match(expected.expose(), &token) => {
                    Ok(Principal::Bootstrap)
                }
                _ => Err(unauthorized()),
            },
            PresentedCredential::Key(key) => self.verify_key(&key).await.map(Principal::Key),
        }
    }

    /// Authenticates and authorizes in one step.
    pub async fn admit(
        &self,
        req: &GateRequest<'_>,
        requirement: Requirement,
        harness_header: Option<&str>,
    ) -> Result<Principal, Problem> {
        let principal = self.authenticate(req).await?;
        gate::authorize(&principal, requirement, harness_header)?;
        Ok(principal)
    }

    async fn verify_key(&self, key: &PresentedKey) -> Result<Arc<KeyPrincipal>, Problem> {
        let now = self.clock.now();
        let cached = match self.cached(key.key_id(), now) {
            Some(cached) => cached,
            None => {
                let stored = self.store.find_key(key.key_id()).await.map_err(internal)?;
                let cached = CachedKey {
                    known: stored.map(|k| KnownKey {
                        digest: k.digest.clone(),
                        revoked: k.is_revoked(),
                        principal: Arc::new(KeyPrincipal {
                            key_id: k.key_id,
                            caller_scope: k.caller_scope,
                            scopes: k.scopes,
                            harness: k.harness,
                            cohorts: k.cohorts,
                        }),
                    }),
                    fetched_at: now,
                };
                if let Ok(mut cache) = self.cache.write() {
                    if cache.len() >= MAX_CACHED_KEYS {
                        cache.clear();
                    }
                    cache.insert(key.key_id().clone(), cached.clone());
                }
                cached
            }
        };
        // The digest comparison runs whatever the outcome, so every refusal takes the same path.
        let digest = cached.known.as_ref().map_or(&self.decoy, |k| &k.digest);
        let matches = key.verify(digest);
        match cached.known {
            Some(known) if matches && !known.revoked => Ok(known.principal),
            _ => Err(unauthorized()),
        }
    }

    fn cached(&self, key_id: &KeyId, now: Timestamp) -> Option<CachedKey> {
        let cache = self.cache.read().ok()?;
        let entry = cache.get(key_id)?;
        let age = now.as_millis().saturating_sub(entry.fetched_at.as_millis());
        (0..self.ttl_ms).contains(&age).then(|| entry.clone())
    }

    /// Drops a key from this instance's cache (after a revocation here).
    pub fn forget(&self, key_id: &KeyId) {
        if let Ok(mut cache) = self.cache.write() {
            cache.remove(key_id);
        }
    }
}
