//! The simulated runtime of a hollow node (kubemark's fake remote runtime): a real gRPC
//! server of CRI `runtime.v1` on a unix socket, whose sandboxes and containers are rows in
//! memory. Containers go created → running → exited as the node asks, and run until
//! stopped; pulls succeed at once; stats are zero; probes' `ExecSync` succeeds; streams are
//! refused. The node's CRI client, PLEG and status code run against it unchanged.

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use tonic::Status;
use tonic::body::Body;

use crate::cri::*;

/// A hollow node's runtime state.
#[derive(Debug)]
pub struct SimulatedRuntime {
    state: Mutex<State>,
    /// The first two octets of the pod IPs it hands out (`10.x`).
    subnet: [u8; 2],
    /// Where its images "live" (`ImageFsInfo`): the node's own directory.
    image_fs: String,
}

#[derive(Debug, Default)]
struct State {
    sandboxes: HashMap<String, PodSandboxStatus>,
    containers: HashMap<String, ContainerStatus>,
    /// Container id → its sandbox.
    owners: HashMap<String, String>,
    images: HashMap<String, Image>,
    next: u64,
}

fn now_nanos() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_nanos()).unwrap_or(i64::MAX)
}

fn matches_labels(labels: &HashMap<String, String>, selector: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

impl State {
    fn id(&mut self, kind: &str) -> String {
        self.next += 1;
        format!("{kind}{:060x}", self.next)
    }
}

impl SimulatedRuntime {
    /// A runtime whose pods get addresses in `10.<subnet>.0.0/16`, its images said to
    /// live on `image_fs`'s file system.
    pub fn new(subnet: u16, image_fs: &Path) -> Arc<SimulatedRuntime> {
        Arc::new(SimulatedRuntime {
            state: Mutex::default(),
            subnet: subnet.to_be_bytes(),
            image_fs: image_fs.display().to_string(),
        })
    }

    fn image_fs_info(&self, _req: ImageFsInfoRequest) -> Result<ImageFsInfoResponse, Status> {
        Ok(ImageFsInfoResponse {
            image_filesystems: vec![ImageFsUsage {
                fs_id: Some(FilesystemIdentifier { mountpoint: self.image_fs.clone() }),
            }],
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sandboxes and containers it holds now.
    pub fn counts(&self) -> (usize, usize) {
        let state = self.state();
        (state.sandboxes.len(), state.containers.len())
    }

    fn version(&self) -> VersionResponse {
        VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "podpass-simulated".into(),
            runtime_version: env!("CARGO_PKG_VERSION").into(),
            runtime_api_version: "v1".into(),
        }
    }

    fn run_pod_sandbox(&self, req: RunPodSandboxRequest) -> Result<RunPodSandboxResponse, Status> {
        let config = req.config.ok_or_else(|| Status::invalid_argument("no sandbox config"))?;
        let mut state = self.state();
        let id = state.id("s");
        let n = state.sandboxes.len() as u64 + state.next;
        let ip = format!("10.{}.{}.{}", self.subnet[1], (n >> 8) & 0xff, n & 0xff);
        let status = PodSandboxStatus {
            id: id.clone(),
            metadata: config.metadata,
            state: SANDBOX_READY,
            created_at: now_nanos(),
            network: Some(PodSandboxNetworkStatus { ip }),
            labels: config.labels,
        };
        state.sandboxes.insert(id.clone(), status);
        Ok(RunPodSandboxResponse { pod_sandbox_id: id })
    }

    fn stop_pod_sandbox(&self, req: PodSandboxIdRequest) -> Result<Empty, Status> {
        let mut state = self.state();
        let now = now_nanos();
        let State { sandboxes, containers, owners, .. } = &mut *state;
        if let Some(sandbox) = sandboxes.get_mut(&req.pod_sandbox_id) {
            sandbox.state = SANDBOX_READY + 1;
            for (id, c) in containers.iter_mut() {
                if owners.get(id) == Some(&req.pod_sandbox_id) && c.state != CONTAINER_EXITED {
                    c.state = CONTAINER_EXITED;
                    c.finished_at = now;
                    c.exit_code = 137;
                    c.reason = "Error".into();
                }
            }
        }
        Ok(Empty {})
    }

    fn remove_pod_sandbox(&self, req: PodSandboxIdRequest) -> Result<Empty, Status> {
        let mut state = self.state();
        state.sandboxes.remove(&req.pod_sandbox_id);
        let gone: Vec<String> =
            state.owners.iter().filter(|(_, s)| **s == req.pod_sandbox_id).map(|(c, _)| c.clone()).collect();
        for id in gone {
            state.owners.remove(&id);
            state.containers.remove(&id);
        }
        Ok(Empty {})
    }

    fn pod_sandbox_status(&self, req: PodSandboxStatusRequest) -> Result<PodSandboxStatusResponse, Status> {
        let state = self.state();
        let status = state
            .sandboxes
            .get(&req.pod_sandbox_id)
            .cloned()
            .ok_or_else(|| Status::not_found(format!("sandbox {} not found", req.pod_sandbox_id)))?;
        Ok(PodSandboxStatusResponse { status: Some(status), info: HashMap::new() })
    }

    fn list_pod_sandbox(&self, req: ListPodSandboxRequest) -> Result<ListPodSandboxResponse, Status> {
        let filter = req.filter.unwrap_or_default();
        let state = self.state();
        let items = state
            .sandboxes
            .values()
            .filter(|s| filter.id.is_empty() || s.id == filter.id)
            .filter(|s| matches_labels(&s.labels, &filter.label_selector))
            .map(|s| PodSandbox {
                id: s.id.clone(),
                metadata: s.metadata.clone(),
                state: s.state,
                created_at: s.created_at,
                labels: s.labels.clone(),
            })
            .collect();
        Ok(ListPodSandboxResponse { items })
    }

    fn create_container(&self, req: CreateContainerRequest) -> Result<CreateContainerResponse, Status> {
        let config = req.config.ok_or_else(|| Status::invalid_argument("no container config"))?;
        let mut state = self.state();
        if !state.sandboxes.contains_key(&req.pod_sandbox_id) {
            return Err(Status::not_found(format!("sandbox {} not found", req.pod_sandbox_id)));
        }
        let id = state.id("c");
        let image_ref = config.image.as_ref().map(|i| image_id(&i.image)).unwrap_or_default();
        let status = ContainerStatus {
            id: id.clone(),
            metadata: config.metadata,
            state: CONTAINER_CREATED,
            created_at: now_nanos(),
            image: config.image,
            image_ref: image_ref.clone(),
            image_id: image_ref,
            labels: config.labels,
            annotations: config.annotations,
            log_path: config.log_path,
            ..ContainerStatus::default()
        };
        state.containers.insert(id.clone(), status);
        state.owners.insert(id.clone(), req.pod_sandbox_id);
        Ok(CreateContainerResponse { container_id: id })
    }

    fn with_container<T>(&self, id: &str, f: impl FnOnce(&mut ContainerStatus) -> T) -> Result<T, Status> {
        let mut state = self.state();
        let c = state.containers.get_mut(id).ok_or_else(|| Status::not_found(format!("container {id} not found")))?;
        Ok(f(c))
    }

    fn start_container(&self, req: ContainerIdRequest) -> Result<Empty, Status> {
        self.with_container(&req.container_id, |c| {
            if c.state == CONTAINER_CREATED {
                c.state = CONTAINER_RUNNING;
                c.started_at = now_nanos();
                Ok(Empty {})
            } else {
                Err(Status::failed_precondition("container is not in created state"))
            }
        })?
    }

    fn stop_container(&self, req: StopContainerRequest) -> Result<Empty, Status> {
        self.with_container(&req.container_id, |c| {
            if c.state != CONTAINER_EXITED {
                c.state = CONTAINER_EXITED;
                c.finished_at = now_nanos();
                // Stopped by its TERM, as a well-behaved process.
                c.exit_code = 0;
                c.reason = "Completed".into();
            }
            Empty {}
        })
    }

    fn remove_container(&self, req: ContainerIdRequest) -> Result<Empty, Status> {
        let mut state = self.state();
        state.containers.remove(&req.container_id);
        state.owners.remove(&req.container_id);
        Ok(Empty {})
    }

    fn container_status(&self, req: ContainerStatusRequest) -> Result<ContainerStatusResponse, Status> {
        self.with_container(&req.container_id, |c| ContainerStatusResponse { status: Some(c.clone()) })
    }

    fn list_containers(&self, req: ListContainersRequest) -> Result<ListContainersResponse, Status> {
        let filter = req.filter.unwrap_or_default();
        let state = self.state();
        let containers = state
            .containers
            .values()
            .filter(|c| filter.id.is_empty() || c.id == filter.id)
            .filter(|c| filter.state.as_ref().is_none_or(|s| s.state == c.state))
            .filter(|c| filter.pod_sandbox_id.is_empty() || state.owners.get(&c.id) == Some(&filter.pod_sandbox_id))
            .filter(|c| matches_labels(&c.labels, &filter.label_selector))
            .map(|c| Container {
                id: c.id.clone(),
                pod_sandbox_id: state.owners.get(&c.id).cloned().unwrap_or_default(),
                metadata: c.metadata.clone(),
                image: c.image.clone(),
                image_ref: c.image_ref.clone(),
                state: c.state,
                created_at: c.created_at,
                labels: c.labels.clone(),
                annotations: c.annotations.clone(),
            })
            .collect();
        Ok(ListContainersResponse { containers })
    }

    fn stats_of(c: &ContainerStatus) -> ContainerStats {
        ContainerStats {
            attributes: Some(ContainerAttributes { id: c.id.clone(), labels: c.labels.clone() }),
            cpu: None,
            memory: None,
            writable_layer: None,
        }
    }

    fn container_stats(&self, req: ContainerStatsRequest) -> Result<ContainerStatsResponse, Status> {
        self.with_container(&req.container_id, |c| ContainerStatsResponse { stats: Some(Self::stats_of(c)) })
    }

    fn list_container_stats(&self, req: ListContainerStatsRequest) -> Result<ListContainerStatsResponse, Status> {
        let selector = req.filter.map(|f| f.label_selector).unwrap_or_default();
        let state = self.state();
        let stats = state
            .containers
            .values()
            .filter(|c| c.state == CONTAINER_RUNNING && matches_labels(&c.labels, &selector))
            .map(Self::stats_of)
            .collect();
        Ok(ListContainerStatsResponse { stats })
    }

    fn exec_sync(&self, req: ExecSyncRequest) -> Result<ExecSyncResponse, Status> {
        self.with_container(&req.container_id, |_| ExecSyncResponse::default())
    }

    fn pull_image(&self, req: PullImageRequest) -> Result<PullImageResponse, Status> {
        let name = req.image.map(|i| i.image).unwrap_or_default();
        if name.is_empty() {
            return Err(Status::invalid_argument("no image named"));
        }
        let id = image_id(&name);
        let mut state = self.state();
        let image = state.images.entry(id.clone()).or_insert_with(|| Image {
            id: id.clone(),
            size: 1 << 20,
            ..Image::default()
        });
        if !image.repo_tags.contains(&name) {
            image.repo_tags.push(name);
        }
        Ok(PullImageResponse { image_ref: id })
    }

    fn find_image(state: &State, name: &str) -> Option<Image> {
        state
            .images
            .get(name)
            .or_else(|| state.images.values().find(|i| i.repo_tags.iter().any(|t| t == name)))
            .cloned()
    }

    fn image_status(&self, req: ImageStatusRequest) -> Result<ImageStatusResponse, Status> {
        let name = req.image.map(|i| i.image).unwrap_or_default();
        Ok(ImageStatusResponse { image: Self::find_image(&self.state(), &name) })
    }

    fn list_images(&self, _req: ListImagesRequest) -> Result<ListImagesResponse, Status> {
        Ok(ListImagesResponse { images: self.state().images.values().cloned().collect() })
    }

    fn remove_image(&self, req: RemoveImageRequest) -> Result<RemoveImageResponse, Status> {
        let name = req.image.map(|i| i.image).unwrap_or_default();
        let mut state = self.state();
        if let Some(image) = Self::find_image(&state, &name) {
            state.images.remove(&image.id);
        }
        Ok(RemoveImageResponse {})
    }
}

/// The simulated image id of an image name: stable, so every pull of a name is one image.
fn image_id(name: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut h);
    format!("sha256:{:064x}", h.finish())
}

/// One unary method: the request decoded, `F` run on the runtime, the answer encoded.
struct Unary<F>(Arc<SimulatedRuntime>, F);

impl<Req, Resp, F> tonic::server::UnaryService<Req> for Unary<F>
where
    F: Fn(&SimulatedRuntime, Req) -> Result<Resp, Status>,
{
    type Response = Resp;
    type Future = std::future::Ready<Result<tonic::Response<Resp>, Status>>;

    fn call(&mut self, request: tonic::Request<Req>) -> Self::Future {
        std::future::ready((self.1)(&self.0, request.into_inner()).map(tonic::Response::new))
    }
}

/// Answers one gRPC call by its path.
async fn dispatch(runtime: Arc<SimulatedRuntime>, req: http::Request<Body>) -> http::Response<Body> {
    macro_rules! unary {
        ($req:ty, $resp:ty, $method:ident) => {{
            let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::<$resp, $req>::default());
            grpc.unary(Unary(runtime, |r: &SimulatedRuntime, q: $req| r.$method(q)), req).await
        }};
    }
    match req.uri().path().to_owned().as_str() {
        "/runtime.v1.RuntimeService/Version" => {
            let mut grpc =
                tonic::server::Grpc::new(tonic_prost::ProstCodec::<VersionResponse, VersionRequest>::default());
            grpc.unary(Unary(runtime, |r: &SimulatedRuntime, _: VersionRequest| Ok(r.version())), req).await
        }
        "/runtime.v1.RuntimeService/RunPodSandbox" => {
            unary!(RunPodSandboxRequest, RunPodSandboxResponse, run_pod_sandbox)
        }
        "/runtime.v1.RuntimeService/StopPodSandbox" => unary!(PodSandboxIdRequest, Empty, stop_pod_sandbox),
        "/runtime.v1.RuntimeService/RemovePodSandbox" => unary!(PodSandboxIdRequest, Empty, remove_pod_sandbox),
        "/runtime.v1.RuntimeService/PodSandboxStatus" => {
            unary!(PodSandboxStatusRequest, PodSandboxStatusResponse, pod_sandbox_status)
        }
        "/runtime.v1.RuntimeService/ListPodSandbox" => {
            unary!(ListPodSandboxRequest, ListPodSandboxResponse, list_pod_sandbox)
        }
        "/runtime.v1.RuntimeService/CreateContainer" => {
            unary!(CreateContainerRequest, CreateContainerResponse, create_container)
        }
        "/runtime.v1.RuntimeService/StartContainer" => unary!(ContainerIdRequest, Empty, start_container),
        "/runtime.v1.RuntimeService/StopContainer" => unary!(StopContainerRequest, Empty, stop_container),
        "/runtime.v1.RuntimeService/RemoveContainer" => unary!(ContainerIdRequest, Empty, remove_container),
        "/runtime.v1.RuntimeService/ReopenContainerLog" => {
            let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::<Empty, ContainerIdRequest>::default());
            grpc.unary(Unary(runtime, |_: &SimulatedRuntime, _: ContainerIdRequest| Ok(Empty {})), req).await
        }
        "/runtime.v1.RuntimeService/ContainerStatus" => {
            unary!(ContainerStatusRequest, ContainerStatusResponse, container_status)
        }
        "/runtime.v1.RuntimeService/ListContainers" => {
            unary!(ListContainersRequest, ListContainersResponse, list_containers)
        }
        "/runtime.v1.RuntimeService/ContainerStats" => {
            unary!(ContainerStatsRequest, ContainerStatsResponse, container_stats)
        }
        "/runtime.v1.RuntimeService/ListContainerStats" => {
            unary!(ListContainerStatsRequest, ListContainerStatsResponse, list_container_stats)
        }
        "/runtime.v1.RuntimeService/ExecSync" => unary!(ExecSyncRequest, ExecSyncResponse, exec_sync),
        "/runtime.v1.ImageService/PullImage" => unary!(PullImageRequest, PullImageResponse, pull_image),
        "/runtime.v1.ImageService/ImageStatus" => unary!(ImageStatusRequest, ImageStatusResponse, image_status),
        "/runtime.v1.ImageService/ListImages" => unary!(ListImagesRequest, ListImagesResponse, list_images),
        "/runtime.v1.ImageService/RemoveImage" => unary!(RemoveImageRequest, RemoveImageResponse, remove_image),
        "/runtime.v1.ImageService/ImageFsInfo" => unary!(ImageFsInfoRequest, ImageFsInfoResponse, image_fs_info),
        path => Status::unimplemented(format!("a hollow node's runtime does not serve {path}")).into_http(),
    }
}

macro_rules! service {
    ($name:ident, $grpc:literal) => {
        /// One CRI service of a [`SimulatedRuntime`] (both answer every path: the path
        /// says which method).
        #[derive(Clone)]
        struct $name(Arc<SimulatedRuntime>);

        impl tonic::server::NamedService for $name {
            const NAME: &'static str = $grpc;
        }

        impl tower::Service<http::Request<Body>> for $name {
            type Response = http::Response<Body>;
            type Error = Infallible;
            type Future =
                std::pin::Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>>;

            fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
                Poll::Ready(Ok(()))
            }

            fn call(&mut self, req: http::Request<Body>) -> Self::Future {
                let runtime = Arc::clone(&self.0);
                Box::pin(async move { Ok(dispatch(runtime, req).await) })
            }
        }
    };
}

service!(RuntimeService, "runtime.v1.RuntimeService");
service!(ImageService, "runtime.v1.ImageService");

/// Why a simulated runtime could not serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The socket could not be bound.
    #[error("binding {path}: {source}")]
    Bind {
        /// The socket's path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The server failed.
    #[error("serving the simulated runtime: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// Binds the runtime's socket at `path` (one left by an earlier run is replaced).
pub fn listen(path: &Path) -> Result<tokio::net::UnixListener, ServeError> {
    let _ = std::fs::remove_file(path);
    tokio::net::UnixListener::bind(path).map_err(|source| ServeError::Bind { path: path.display().to_string(), source })
}

impl SimulatedRuntime {
    /// Serves both CRI services on `listener` until `shutdown` completes.
    pub async fn serve(
        self: Arc<Self>,
        listener: tokio::net::UnixListener,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) -> Result<(), ServeError> {
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        tonic::transport::Server::builder()
            .add_service(RuntimeService(Arc::clone(&self)))
            .add_service(ImageService(self))
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox(rt: &SimulatedRuntime, uid: &str) -> String {
        let config = PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: "p".into(),
                uid: uid.into(),
                namespace: "ns".into(),
                attempt: 0,
            }),
            labels: HashMap::from([("uid".to_owned(), uid.to_owned())]),
            ..PodSandboxConfig::default()
        };
        rt.run_pod_sandbox(RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() })
            .map(|r| r.pod_sandbox_id)
            .unwrap_or_default()
    }

    #[test]
    fn containers_run_until_stopped_and_go_with_their_sandbox() {
        let rt = SimulatedRuntime::new(1, Path::new("/"));
        let s = sandbox(&rt, "a");
        let other = sandbox(&rt, "b");
        let config = ContainerConfig {
            metadata: Some(ContainerMetadata { name: "app".into(), attempt: 0 }),
            image: Some(ImageSpec { image: "registry.example/app:1".into(), ..ImageSpec::default() }),
            ..ContainerConfig::default()
        };
        let c = rt
            .create_container(CreateContainerRequest {
                pod_sandbox_id: s.clone(),
                config: Some(config),
                sandbox_config: None,
            })
            .map(|r| r.container_id)
            .unwrap_or_default();
        assert!(rt.start_container(ContainerIdRequest { container_id: c.clone() }).is_ok());
        assert!(rt.start_container(ContainerIdRequest { container_id: c.clone() }).is_err(), "started once");
        let running = |sandbox: &str| {
            let filter = ContainerFilter {
                pod_sandbox_id: sandbox.to_owned(),
                state: Some(ContainerStateValue { state: CONTAINER_RUNNING }),
                ..ContainerFilter::default()
            };
            rt.list_containers(ListContainersRequest { filter: Some(filter) }).map(|r| r.containers.len()).unwrap_or(9)
        };
        assert_eq!((running(&s), running(&other)), (1, 0));
        let selected = rt
            .list_pod_sandbox(ListPodSandboxRequest {
                filter: Some(PodSandboxFilter {
                    label_selector: HashMap::from([("uid".to_owned(), "b".to_owned())]),
                    ..PodSandboxFilter::default()
                }),
            })
            .map(|r| r.items.into_iter().map(|i| i.id).collect::<Vec<_>>())
            .unwrap_or_default();
        assert_eq!(selected, std::slice::from_ref(&other));
        assert!(rt.stop_pod_sandbox(PodSandboxIdRequest { pod_sandbox_id: s.clone() }).is_ok());
        assert_eq!(running(&s), 0, "stopping the sandbox stops its containers");
        assert!(rt.remove_pod_sandbox(PodSandboxIdRequest { pod_sandbox_id: s }).is_ok());
        assert_eq!(rt.counts(), (1, 0));
        let missing = rt.container_status(ContainerStatusRequest { container_id: c, verbose: false });
        assert_eq!(missing.err().map(|e| e.code()), Some(tonic::Code::NotFound));
    }

    #[test]
    fn a_pulled_image_is_found_by_its_name_and_its_id() {
        let rt = SimulatedRuntime::new(1, Path::new("/"));
        let spec = |name: &str| Some(ImageSpec { image: name.into(), ..ImageSpec::default() });
        let status = |name: &str| {
            rt.image_status(ImageStatusRequest { image: spec(name), verbose: false }).ok().and_then(|r| r.image)
        };
        assert!(status("registry.example/app:1").is_none());
        let id = rt
            .pull_image(PullImageRequest { image: spec("registry.example/app:1"), auth: None })
            .map(|r| r.image_ref)
            .unwrap_or_default();
        assert!(id.starts_with("sha256:"));
        assert_eq!(status("registry.example/app:1").map(|i| i.id), Some(id.clone()));
        assert_eq!(status(&id).map(|i| i.repo_tags), Some(vec!["registry.example/app:1".to_owned()]));
    }
}
