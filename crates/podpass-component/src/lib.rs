//! What podpass's control-plane components that are API clients share (the controller
//! manager, the scheduler), as client-go's tools give them to kube-controller-manager and
//! kube-scheduler:
//!
//! - [`leader`]: one leader at a time through a Lease (`tools/leaderelection`);
//! - [`events`]: core/v1 Events written through the component's own client
//!   (`tools/record`);
//! - [`LeaderElectionFlags`]: the `--leader-elect*` flags;
//! - [`client`] and [`lead`]: how a component runs, leading or not;
//! - [`create_bootstrap_token`]: `kubeadm token create`, through the API.

mod bootstrap_tokens;
pub mod events;
mod flags;
pub mod leader;
mod run;

pub use bootstrap_tokens::{TokenCreate, TokenCreateError, create_bootstrap_token};
pub use flags::LeaderElectionFlags;
pub use run::{RunError, client, lead};
