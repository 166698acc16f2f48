//! The live connections of one server, oldest first, each knowing whether a request is in
//! flight on it. Connections are not the unit of fairness — work in flight is (as
//! kube-apiserver bounds requests in flight, not sockets): when a server or one client
//! address is at its connection bound, the oldest *idle* connection (mid-handshake, mid-
//! headers, or kept alive between requests) is closed to make room for the new one, rather
//! than the new one refused. A flood of half-open connections thus never locks out a client
//! that sends whole requests; only connections all busy with requests hold their place.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use tokio::sync::Notify;

/// One connection's place in [`Connections`].
#[derive(Debug)]
pub(crate) struct Slot {
    ip: IpAddr,
    in_flight: AtomicUsize,
    /// Notified when the connection is to close (shed).
    pub(crate) shed: Notify,
}

impl Slot {
    /// Marks a request in flight until the guard (and any body holding it) is dropped.
    pub(crate) fn busy(self: &Arc<Self>) -> BusyGuard {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        BusyGuard(Arc::clone(self))
    }
}

/// A request in flight on a connection.
#[derive(Debug)]
pub(crate) struct BusyGuard(Arc<Slot>);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The live connections of a server.
#[derive(Debug, Default)]
pub(crate) struct Connections {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next: u64,
    /// By age: the key grows with each registration.
    live: BTreeMap<u64, Arc<Slot>>,
}

/// A registered connection: removed from [`Connections`] when dropped.
#[derive(Debug)]
pub(crate) struct Registration {
    conns: Arc<Connections>,
    id: u64,
    /// The connection's slot.
    pub(crate) slot: Arc<Slot>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.conns.lock().live.remove(&self.id);
    }
}

impl Connections {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a new connection of `ip` (the newest).
    pub(crate) fn register(self: &Arc<Self>, ip: IpAddr) -> Registration {
        let slot = Arc::new(Slot { ip, in_flight: AtomicUsize::new(0), shed: Notify::new() });
        let mut inner = self.lock();
        let id = inner.next;
        inner.next += 1;
        inner.live.insert(id, Arc::clone(&slot));
        Registration { conns: Arc::clone(self), id, slot }
    }

    /// Live connections of `ip`.
    pub(crate) fn of(&self, ip: IpAddr) -> usize {
        self.lock().live.values().filter(|s| s.ip == ip).count()
    }

    /// Closes the oldest idle connection (of `ip` only, when given): it stops counting at
    /// once and its task ends. Whether there was one.
    pub(crate) fn shed_oldest_idle(&self, ip: Option<IpAddr>) -> bool {
        let mut inner = self.lock();
        let found = inner
            .live
            .iter()
            .find(|(_, s)| ip.is_none_or(|ip| s.ip == ip) && s.in_flight.load(Ordering::Acquire) == 0)
            .map(|(id, s)| (*id, Arc::clone(s)));
        let Some((id, slot)) = found else { return false };
        inner.live.remove(&id);
        drop(inner);
        // notify_one stores the wakeup when the task is not waiting yet.
        slot.shed.notify_one();
        true
    }
}

/// A response body that keeps its request counted in flight until it has been sent (a
/// watch or a followed log is busy for as long as it streams).
pub(crate) struct HoldBody<B> {
    pub(crate) inner: B,
    pub(crate) _busy: BusyGuard,
}

impl<B: hyper::body::Body + Unpin> hyper::body::Body for HoldBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_idle_connection_goes_first_and_a_busy_one_never() {
        let conns = Arc::new(Connections::default());
        let (a, b) = (IpAddr::from([127, 0, 0, 1]), IpAddr::from([127, 0, 0, 2]));
        let first = conns.register(a);
        let second = conns.register(a);
        let other = conns.register(b);
        let busy = first.slot.busy();
        assert_eq!(conns.of(a), 2);
        // The oldest is busy: the next oldest idle one goes.
        assert!(conns.shed_oldest_idle(Some(a)));
        assert_eq!(conns.of(a), 1);
        // Only busy connections of `a` are left.
        assert!(!conns.shed_oldest_idle(Some(a)));
        // Another address's idle connection may go for the server's bound.
        assert!(conns.shed_oldest_idle(None));
        assert_eq!(conns.of(b), 0);
        drop(busy);
        assert!(conns.shed_oldest_idle(None), "idle again once its request is done");
        drop((first, second, other));
        assert_eq!(conns.of(a), 0);
    }
}
