//! Resolving upstream host names through a resolver Herma controls, so a name that promises
//! loopback (`localhost`, `*.localhost`) can never lead to another machine.
//!
//! Every HTTP client here resolves through [`GuardedResolver`]: the name is normalized
//! (`herma_core::upstream::normalize_host`: `localhost.` is looked up as `localhost`), looked
//! up, and the answer is refused unless it keeps the name's promise
//! (`herma_core::upstream::resolution_keeps_promise`). IP literals never reach a resolver.

use std::error::Error;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use async_trait::async_trait;
use herma_core::upstream::{normalize_host, resolution_keeps_promise};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// A resolution refused because a loopback name resolved to another address.
#[derive(Debug, thiserror::Error)]
#[error("`{host}` names loopback but resolved to a non-loopback address")]
pub struct BrokenLoopbackPromise {
    pub host: String,
}

/// Looks a host name up: the system resolver in production, a fixed answer in tests.
#[async_trait]
pub(crate) trait Lookup: Send + Sync {
    async fn lookup(&self, host: &str) -> io::Result<Vec<SocketAddr>>;
}

/// The operating system's resolver (`getaddrinfo`, through tokio).
struct SystemLookup;

#[async_trait]
impl Lookup for SystemLookup {
    async fn lookup(&self, host: &str) -> io::Result<Vec<SocketAddr>> {
        Ok(tokio::net::lookup_host((host, 0)).await?.collect())
    }
}

/// The resolver every client of this crate uses.
pub(crate) struct GuardedResolver {
    lookup: Arc<dyn Lookup>,
}

impl GuardedResolver {
    pub(crate) fn system() -> Arc<Self> {
        Self::with(Arc::new(SystemLookup))
    }

    pub(crate) fn with(lookup: Arc<dyn Lookup>) -> Arc<Self> {
        Arc::new(Self { lookup })
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let lookup = self.lookup.clone();
        let raw = name.as_str().to_owned();
        Box::pin(async move {
            let host = normalize_host(&raw).unwrap_or(raw);
            let found = lookup.lookup(&host).await?;
            let addresses: Vec<IpAddr> = found.iter().map(SocketAddr::ip).collect();
            if !resolution_keeps_promise(&host, &addresses) {
                tracing::warn!(
                    host = %host,
                    addresses = ?addresses,
                    "a loopback name resolved to a non-loopback address; refused"
                );
                return Err(
                    Box::new(BrokenLoopbackPromise { host }) as Box<dyn Error + Send + Sync>
                );
            }
            Ok(Box::new(found.into_iter()) as Addrs)
        })
    }
}

/// The refusal behind `err`, if a resolution was refused.
pub(crate) fn broken_promise<'a>(
    err: &'a (dyn Error + 'static),
) -> Option<&'a BrokenLoopbackPromise> {
    let mut current = Some(err);
    while let Some(e) = current {
        if let Some(refused) = e.downcast_ref::<BrokenLoopbackPromise>() {
            return Some(refused);
        }
        current = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    /// Answers every name with the same addresses.
    struct Fixed(Vec<SocketAddr>);

    #[async_trait]
    impl Lookup for Fixed {
        async fn lookup(&self, _: &str) -> io::Result<Vec<SocketAddr>> {
            Ok(self.0.clone())
        }
    }

    fn fixed(addresses: &[&str]) -> Arc<GuardedResolver> {
        GuardedResolver::with(Arc::new(Fixed(
            addresses
                .iter()
                .map(|a| SocketAddr::new(a.parse().unwrap(), 0))
                .collect(),
        )))
    }

    async fn resolve(
        resolver: &GuardedResolver,
        name: &str,
    ) -> Result<Vec<IpAddr>, Box<dyn Error + Send + Sync>> {
        let name: Name = name.parse().unwrap();
        Ok(resolver.resolve(name).await?.map(|a| a.ip()).collect())
    }

    #[tokio::test]
    async fn a_loopback_name_resolving_to_a_public_address_is_refused() {
        let public = fixed(&["93.184.216.34"]);
        for name in ["localhost", "localhost.", "LOCALHOST", "api.localhost"] {
            let err = resolve(&public, name).await.unwrap_err();
            let refused = broken_promise(err.as_ref()).expect("a refusal");
            assert_eq!(
                refused.host,
                name.to_ascii_lowercase().trim_end_matches('.'),
                "{name}"
            );
        }
        let mixed = fixed(&["127.0.0.1", "10.0.0.1"]);
        assert!(
            resolve(&mixed, "localhost").await.is_err(),
            "one stray address refuses all"
        );
        // Other names promise nothing: the allowlist decided them.
        assert_eq!(
            resolve(&public, "ollama.internal").await.unwrap(),
            ["93.184.216.34".parse::<IpAddr>().unwrap()]
        );
        let loopback = fixed(&["127.0.0.1", "::1"]);
        assert_eq!(resolve(&loopback, "localhost").await.unwrap().len(), 2);
    }

    #[tokio::test]
    async fn a_refused_resolution_is_host_refused_and_nothing_is_sent() {
        let upstream = crate::HttpUpstream::build(
            std::time::Duration::from_secs(1),
            std::time::Duration::from_secs(1),
            std::time::Duration::from_secs(1),
            fixed(&["93.184.216.34"]),
        )
        .unwrap();
        let sent = crate::Upstream::send(
            &upstream,
            crate::UpstreamRequest {
                method: "GET".into(),
                url: "http://localhost:9/v1/models".into(),
                headers: crate::HeaderMap::new(),
                body: bytes::Bytes::new(),
            },
        )
        .await;
        match sent {
            Err(crate::UpstreamError::LoopbackPromiseBroken(host)) => {
                assert_eq!(host, "localhost");
            }
            Err(other) => panic!("{other}"),
            Ok(response) => panic!("sent, answered {}", response.status),
        }
    }
}
