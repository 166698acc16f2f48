//! The one connection to the CRI runtime: a gRPC channel on its unix socket, shared by the
//! image service ([`crate::images::CriImageService`]) and the runtime service
//! ([`crate::runtime::CriRuntime`]), and the one way a unary call is made on it.

use std::path::PathBuf;
use std::time::Duration;

use http::uri::PathAndQuery;
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// Why a CRI runtime could not be reached.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    /// Not a `unix://` endpoint (or a bare path).
    #[error("only unix:// endpoints are supported")]
    NotUnix,
    /// The socket did not answer.
    #[error("{}", with_source(.0))]
    Transport(#[from] tonic::transport::Error),
}

/// tonic's transport error says only "transport error": what it wraps says why.
fn with_source(e: &tonic::transport::Error) -> String {
    format!("{e}: {}", std::error::Error::source(e).map(ToString::to_string).unwrap_or_default())
}

/// A gRPC channel to a CRI runtime at `unix:///path` (or a bare path); both CRI services
/// share it.
pub(crate) async fn connect(endpoint: &str) -> Result<Channel, ConnectError> {
    let path = match endpoint.strip_prefix("unix://") {
        Some(p) => PathBuf::from(p),
        None if endpoint.starts_with('/') => PathBuf::from(endpoint),
        None => return Err(ConnectError::NotUnix),
    };
    Endpoint::from_static("http://cri.invalid")
        .connect_timeout(Duration::from_secs(10))
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { tokio::net::UnixStream::connect(path).await.map(TokioIo::new) }
        }))
        .await
        .map_err(ConnectError::from)
}

/// Why a CRI call failed: the channel, or the runtime's answer.
pub(crate) enum CallError {
    /// The channel was not ready.
    Connect(String),
    /// The runtime answered an error.
    Status(tonic::Status),
}

/// One unary CRI call on `channel` (both services' clients make theirs here).
pub(crate) async fn unary<Req, Resp>(
    channel: &Channel,
    method: &'static str,
    request: Req,
    timeout: Duration,
) -> Result<Resp, CallError>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.map_err(|e| CallError::Connect(e.to_string()))?;
    let mut req = tonic::Request::new(request);
    req.set_timeout(timeout);
    let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
    grpc.unary(req, PathAndQuery::from_static(method), codec)
        .await
        .map(tonic::Response::into_inner)
        .map_err(CallError::Status)
}
