//! The process's stop signal, shared by the controllers, the caches'
//! watches and the tasks beside them.

use std::future::Future;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};

/// Resolves once the process should stop; cheap to clone.
pub type Shutdown = Shared<BoxFuture<'static, ()>>;

/// Wraps any future as a [`Shutdown`].
pub fn shutdown_on(fut: impl Future<Output = ()> + Send + 'static) -> Shutdown {
    fut.boxed().shared()
}
