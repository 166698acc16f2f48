//! The few control-plane calls `podpass up` makes, as the cluster admin of its data dir.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// Answers larger than this are refused (the demo reads single objects and short lists).
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// An admin client of the control plane whose data dir it was built from.
#[derive(Clone)]
pub struct Api {
    client: reqwest::Client,
    /// For watches: no deadline on the whole answer.
    streaming: reqwest::Client,
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    token: String,
}

impl Api {
    /// Reads the server URL, CA and the admin's token from the data dir.
    pub fn from_data_dir(dir: &Path) -> Result<Api> {
        let url = std::fs::read_to_string(dir.join("server-url")).context("reading server-url")?.trim().to_owned();
        let ca = std::fs::read(dir.join("pki/ca.crt")).context("reading pki/ca.crt")?;
        let ca = reqwest::Certificate::from_pem(&ca).context("pki/ca.crt")?;
        let tokens = std::fs::read_to_string(dir.join("tokens.csv")).context("reading tokens.csv")?;
        // The first line is the admin's (`podpass apiserver` writes it first).
        let token = tokens.split(',').next().unwrap_or_default().trim().to_owned();
        let client = reqwest::Client::builder()
            .tls_certs_only([ca.clone()])
            .timeout(Duration::from_secs(10))
            .build()
            .context("building the API client")?;
        let streaming = reqwest::Client::builder()
            .tls_certs_only([ca])
            .connect_timeout(Duration::from_secs(10))
            .build()
            .context("building the API client")?;
        Ok(Api { client, streaming, url, token })
    }

    async fn send(&self, req: reqwest::RequestBuilder, what: &str) -> Result<(u16, Value)> {
        let resp = req.bearer_auth(&self.token).send().await.with_context(|| what.to_owned())?;
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.with_context(|| what.to_owned())?;
        if bytes.len() > MAX_ANSWER_BYTES {
            bail!("{what}: answer of {} bytes", bytes.len());
        }
        Ok((status, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
    }

    /// GET `path`: the status and the body (`null` if not JSON).
    pub async fn get(&self, path: &str) -> Result<(u16, Value)> {
        self.send(self.client.get(format!("{}{path}", self.url)), &format!("GET {path}")).await
    }

    /// GET `path` answering text (a log), which must answer 200.
    pub async fn get_text(&self, path: &str) -> Result<String> {
        let resp = self.client.get(format!("{}{path}", self.url)).bearer_auth(&self.token).send().await?;
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await?;
        if bytes.len() > MAX_ANSWER_BYTES {
            bail!("GET {path}: answer of {} bytes", bytes.len());
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if status != 200 {
            bail!("GET {path}: {status} {text}");
        }
        Ok(text)
    }

    /// GET `path` as a stream (a watch): the answer, which must be 200, its body unread.
    pub async fn stream(&self, path: &str) -> Result<reqwest::Response> {
        let resp = self.streaming.get(format!("{}{path}", self.url)).bearer_auth(&self.token).send().await?;
        if resp.status().as_u16() != 200 {
            bail!("GET {path}: {}", resp.status());
        }
        Ok(resp)
    }

    /// GET `path`, which must exist.
    pub async fn get_ok(&self, path: &str) -> Result<Value> {
        match self.get(path).await? {
            (200, v) => Ok(v),
            (code, v) => bail!("GET {path}: {code} {}", message(&v)),
        }
    }

    /// POST `body` as JSON to `path`: the status and the answer.
    async fn post_status(&self, path: &str, body: &Value) -> Result<(u16, Value)> {
        let req = self
            .client
            .post(format!("{}{path}", self.url))
            .header("content-type", "application/json")
            .body(body.to_string());
        self.send(req, &format!("POST {path}")).await
    }

    /// POST `body` to `path`; the created object.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Value> {
        match self.post_status(path, body).await? {
            (200..=202, v) => Ok(v),
            (code, v) => bail!("POST {path}: {code} {}", message(&v)),
        }
    }

    /// POST `body` to `path` unless it already exists (409): what resuming needs.
    pub async fn ensure(&self, path: &str, body: &Value) -> Result<()> {
        match self.post_status(path, body).await? {
            (200..=202 | 409, _) => Ok(()),
            (code, v) => bail!("POST {path}: {code} {}", message(&v)),
        }
    }

    /// PATCH `path` with a JSON merge patch; it must exist.
    pub async fn merge_patch(&self, path: &str, patch: &Value) -> Result<()> {
        let req = self
            .client
            .patch(format!("{}{path}", self.url))
            .header("content-type", "application/merge-patch+json")
            .body(patch.to_string());
        match self.send(req, &format!("PATCH {path}")).await? {
            (200, _) => Ok(()),
            (code, v) => bail!("PATCH {path}: {code} {}", message(&v)),
        }
    }

    /// DELETE `path` (a missing object is fine).
    pub async fn delete(&self, path: &str) -> Result<()> {
        match self.send(self.client.delete(format!("{}{path}", self.url)), &format!("DELETE {path}")).await? {
            (200..=202 | 404, _) => Ok(()),
            (code, v) => bail!("DELETE {path}: {code} {}", message(&v)),
        }
    }
}

/// A Status answer's message.
fn message(v: &Value) -> String {
    v["message"].as_str().unwrap_or_default().to_owned()
}
