//! Reading governed-fabric endpoints over HTTP: Tessera (`docs/tessera.md`: pages of records,
//! content-addressed blobs) and remote Herma-compatible context APIs (handshakes). One request
//! per call, no redirects, no retries, a hard timeout and a size limit on every body.

use std::time::Duration;

/// A Tessera or Herma-compatible endpoint.
pub struct FabricClient {
    client: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl std::fmt::Debug for FabricClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FabricClient")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl FabricClient {
    pub fn new(base: &str, token: Option<&str>, timeout: Duration) -> Result<Self, String> {
        let client = crate::client_builder(crate::dns::GuardedResolver::system())
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Self {
            client,
            base: base.trim_end_matches('/').to_owned(),
            token: token.map(str::to_owned),
        })
    }

    async fn get(&self, url: String, max_bytes: usize) -> Result<Vec<u8>, String> {
        let mut request = self.client.get(&url);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let mut response = request.send().await.map_err(|e| crate::describe(&e))?;
        let status = response.status();
        if status.is_redirection() {
            return Err(format!(
                "answered {} with a redirect; Herma never follows redirects",
                status.as_u16()
            ));
        }
        if !status.is_success() {
            return Err(format!("answered HTTP {}", status.as_u16()));
        }
        if response
            .content_length()
            .is_some_and(|n| n > max_bytes as u64)
        {
            return Err(format!("the body is larger than {max_bytes} bytes"));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| crate::describe(&e))? {
            if body.len() + chunk.len() > max_bytes {
                return Err(format!("the body is larger than {max_bytes} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// `GET {base}{path}?{query}`: the body, at most `max_bytes`.
    pub async fn get_path(
        &self,
        path: &str,
        query: &[(&str, &str)],
        max_bytes: usize,
    ) -> Result<Vec<u8>, String> {
        let mut url =
            reqwest::Url::parse(&format!("{}{path}", self.base)).map_err(|e| e.to_string())?;
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
