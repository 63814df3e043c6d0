//! Reading governed-fabric endpoints over HTTP: Tessera (`docs/tessera.md`: pages of records,
//! content-addressed blobs) and remote Herma-compatible context APIs (handshakes). One request
//! per call, no redirects, no retries, bounded waits and a size limit on every body.
//!
//! The client speaks through the [`Upstream`] port, so it runs wherever one exists: natively
//! over [`crate::HttpUpstream`] ([`FabricClient::new`]), at the edge over the platform's fetch
//! ([`FabricClient::over`]).

use std::sync::Arc;

use bytes::Bytes;

use crate::{Upstream, UpstreamError, UpstreamRequest, phrase};

/// A Tessera or Herma-compatible endpoint.
pub struct FabricClient {
    http: Arc<dyn Upstream>,
    base: String,
    token: Option<String>,
    /// The whole call's bound, header wait and body included (natively; at the edge the
    /// platform bounds a request).
    #[cfg(not(target_arch = "wasm32"))]
    total: Option<std::time::Duration>,
}

impl std::fmt::Debug for FabricClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FabricClient")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl FabricClient {
    /// A client of `base` over its own HTTP client: each call, body included, takes at most
    /// `timeout`.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new(
        base: &str,
        token: Option<&str>,
        timeout: std::time::Duration,
    ) -> Result<Self, String> {
        let http =
            crate::HttpUpstream::new(timeout, timeout, timeout).map_err(|e| e.to_string())?;
        Ok(Self {
            total: Some(timeout),
            ..Self::over(Arc::new(http), base, token)
        })
    }

    /// A client of `base` over `http`.
    pub fn over(http: Arc<dyn Upstream>, base: &str, token: Option<&str>) -> Self {
        Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
            token: token.map(str::to_owned),
            #[cfg(not(target_arch = "wasm32"))]
            total: None,
        }
    }

    async fn get(&self, url: String, max_bytes: usize) -> Result<Vec<u8>, String> {
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(total) = self.total {
            return tokio::time::timeout(total, self.get_once(url, max_bytes))
                .await
                .unwrap_or_else(|_| Err("timed out".to_owned()));
        }
        self.get_once(url, max_bytes).await
    }

    async fn get_once(&self, url: String, max_bytes: usize) -> Result<Vec<u8>, String> {
        let mut headers = vec![("accept".to_owned(), b"application/json".to_vec())];
        if let Some(token) = &self.token {
            headers.push((
                "authorization".to_owned(),
                format!("Bearer {token}").into_bytes(),
            ));
        }
        let request = UpstreamRequest {
            method: "GET".to_owned(),
            url,
            headers: crate::header_map(headers).map_err(|e| e.to_string())?,
            body: Bytes::new(),
        };
        let response = match self.http.send(request).await {
            Ok(response) => response,
            Err(UpstreamError::Redirect(status)) => {
                return Err(format!(
                    "answered {status} with a redirect; Herma never follows redirects"
                ));
            }
            Err(e) => return Err(phrase(&e)),
        };
        if !(200..300).contains(&response.status) {
            return Err(format!("answered HTTP {}", response.status));
        }
        crate::read_limited(response, max_bytes)
            .await
            .map_err(|e| phrase(&e))
    }

    /// `GET {base}{path}?{query}`: the body, at most `max_bytes`.
    pub async fn get_path(
        &self,
        path: &str,
        query: &[(&str, &str)],
        max_bytes: usize,
    ) -> Result<Vec<u8>, String> {
        let mut url =
            url::Url::parse(&format!("{}{path}", self.base)).map_err(|e| e.to_string())?;
        for (k, v) in query {
            url.query_pairs_mut().append_pair(k, v);
        }
        self.get(url.to_string(), max_bytes).await
    }

    /// `GET /v1/records?limit=…[&after=…]`: one page, as bytes.
    pub async fn page(
        &self,
        after: Option<&str>,
        limit: usize,
        max_bytes: usize,
    ) -> Result<Vec<u8>, String> {
        let limit = limit.to_string();
        let mut query = vec![("limit", limit.as_str())];
        query.extend(after.map(|a| ("after", a)));
        self.get_path("/v1/records", &query, max_bytes).await
    }

    /// `GET /v1/blobs/<sha256>`: a blob's content.
    pub async fn blob(&self, digest: &str, max_bytes: usize) -> Result<Vec<u8>, String> {
        self.get(format!("{}/v1/blobs/{digest}", self.base), max_bytes)
            .await
    }
}
