//! Streams into a pod's containers (the kubelet's streaming: exec, attach, port-forward),
//! relayed to the runtime's stream server ([`dial`]): SPDY/3.1 framing ([`spdy`]) and the
//! remote-command protocol on it ([`remote_command`]); a port-forward's connection is passed
//! through whole.

pub mod dial;
pub mod remote_command;
pub mod spdy;
