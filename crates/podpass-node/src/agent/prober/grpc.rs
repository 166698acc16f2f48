//! The grpc probe (kubelet `grpc.Prober`): `grpc.health.v1.Health/Check` of the probe's
//! service on the pod's IP, in clear (probes carry no credentials), from the pod's side
//! ([`super::net`]). `SERVING` is success; every other answer a failure in the kubelet's
//! words.

use std::time::Duration;

use http::uri::PathAndQuery;
use hyper_util::rt::TokioIo;
use tonic::transport::Endpoint;

use super::Probed;
use super::net::{Target, connect, join_host_port};

/// `grpc.health.v1.HealthCheckRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct HealthCheckRequest {
    /// The service asked about (empty: the server).
    #[prost(string, tag = "1")]
    pub service: String,
}

/// `grpc.health.v1.HealthCheckResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct HealthCheckResponse {
    /// `ServingStatus`.
    #[prost(int32, tag = "1")]
    pub status: i32,
}

/// `HealthCheckResponse.ServingStatus` SERVING.
pub(crate) const SERVING: i32 = 1;

/// The name of a `ServingStatus` as protobuf's `String()` gives it.
fn status_name(status: i32) -> String {
    match status {
        0 => "UNKNOWN".into(),
        1 => "SERVING".into(),
        2 => "NOT_SERVING".into(),
        3 => "SERVICE_UNKNOWN".into(),
        n => n.to_string(),
    }
}

/// Runs the probe within `timeout`.
pub(crate) async fn grpc_probe(target: &Target, port: u16, service: &str, timeout: Duration) -> Probed {
    let addr = join_host_port(&target.pod_ip, port);
    let within = format!("{}s", timeout.as_secs());
    let endpoint = match Endpoint::from_shared(format!("http://{addr}")) {
        Ok(e) => e.user_agent(super::http::USER_AGENT).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let endpoint = match endpoint {
        Ok(e) => e,
        Err(e) => return Probed::Failure(format!("error: failed to connect service at {addr:?}: {e}")),
    };
    let target = target.clone();
    let connecting = endpoint.connect_with_connector(tower::service_fn(move |_: http::Uri| {
        let target = target.clone();
        async move {
            connect(&target, "", port, Duration::from_secs(3600)).await.map(TokioIo::new).map_err(std::io::Error::other)
        }
    }));
    let deadline = tokio::time::Instant::now() + timeout;
    let channel = match tokio::time::timeout_at(deadline, connecting).await {
        Err(_) => {
            return Probed::Failure(format!(
                "timeout: failed to connect service {addr:?} within {within}: context deadline exceeded"
            ));
        }
        Ok(Err(e)) => {
            let why = std::error::Error::source(&e).map(ToString::to_string).unwrap_or_else(|| e.to_string());
            return Probed::Failure(format!("error: failed to connect service at {addr:?}: {why}"));
        }
        Ok(Ok(channel)) => channel,
    };
    let mut grpc = tonic::client::Grpc::new(channel);
    let call = async {
        grpc.ready().await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let codec = tonic_prost::ProstCodec::<HealthCheckRequest, HealthCheckResponse>::default();
        let request = tonic::Request::new(HealthCheckRequest { service: service.to_owned() });
        grpc.unary(request, PathAndQuery::from_static("/grpc.health.v1.Health/Check"), codec).await
    };
    match tokio::time::timeout_at(deadline, call).await {
        Err(_) => Probed::Failure(format!("timeout: health rpc did not complete within {within}")),
        Ok(Err(status)) if status.code() == tonic::Code::Unimplemented => Probed::Failure(format!(
            "this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
            status.message()
        )),
        Ok(Err(status)) => Probed::Failure(format!(
            "error: health rpc probe failed: rpc error: code = {:?} desc = {}",
            status.code(),
            status.message()
        )),
        Ok(Ok(response)) if response.get_ref().status == SERVING => Probed::Success("service healthy".into()),
        Ok(Ok(response)) => {
            Probed::Failure(format!("service unhealthy (responded with {:?})", status_name(response.get_ref().status)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_port_without_a_grpc_server_fails_in_the_kubelets_words() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("{e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        drop(listener);
        let target = Target { netns: None, pod_ip: "127.0.0.1".into() };
        let Probed::Failure(why) = grpc_probe(&target, port, "", Duration::from_secs(5)).await else {
            panic!("a closed port is healthy")
        };
        assert!(why.starts_with(&format!("error: failed to connect service at \"127.0.0.1:{port}\"")), "{why}");
        assert_eq!(status_name(2), "NOT_SERVING");
    }

    #[tokio::test]
    async fn a_health_server_answers_serving_and_not_serving_by_service() {
        let (reporter, health) = tonic_health::server::health_reporter();
        reporter.set_service_status("app", tonic_health::ServingStatus::Serving).await;
        reporter.set_service_status("db", tonic_health::ServingStatus::NotServing).await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("{e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let server =
            tokio::spawn(tonic::transport::Server::builder().add_service(health).serve_with_incoming(incoming));
        let target = Target { netns: None, pod_ip: "127.0.0.1".into() };
        let probe = |service: &'static str| grpc_probe(&target, port, service, Duration::from_secs(5));
        assert_eq!(probe("").await, Probed::Success("service healthy".into()), "the server itself");
        assert_eq!(probe("app").await, Probed::Success("service healthy".into()));
        assert_eq!(probe("db").await, Probed::Failure("service unhealthy (responded with \"NOT_SERVING\")".into()));
        let Probed::Failure(unknown) = probe("nope").await else { panic!("an unknown service is healthy") };
        assert_eq!(unknown, "error: health rpc probe failed: rpc error: code = NotFound desc = service not registered");
        server.abort();
    }
}
