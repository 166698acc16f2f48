//! A controller's cache of one resource (kube-runtime's reflector over a watcher with its
//! default back-off): the store to read, and the future that keeps it filled.

use std::future::Future;

use kube::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};

/// The store of everything `api` lists, and the future to drive (forever) that fills it.
pub(crate) fn cached<K>(api: Api<K>) -> (Store<K>, impl Future<Output = ()> + Send)
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()).default_backoff());
    (store, futures::StreamExt::for_each(stream, |_| async {}))
}

/// The store of everything `api` lists, and the stream of the objects it touches (to
/// feed a Controller's `watches_stream`, so one watch both fills the store and wakes).
pub(crate) fn cached_events<K>(api: Api<K>) -> (Store<K>, impl futures::Stream<Item = Result<K, watcher::Error>> + Send)
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let stream =
        reflector::reflector(writer, watcher(api, watcher::Config::default()).default_backoff()).touched_objects();
    (store, stream)
}
