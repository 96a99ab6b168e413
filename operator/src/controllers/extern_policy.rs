//! AsyncExternPolicy reconciler (placeholder while the shared pieces land).
use std::sync::Arc;

use kube::runtime::controller::{Action, Controller};
use p4fleet_crds::AsyncExternPolicy;

use super::{Error, scoped_api, watcher_config};
use crate::context::Context;

pub fn controller(ctx: &Context) -> Controller<AsyncExternPolicy> {
    Controller::new(scoped_api::<AsyncExternPolicy>(ctx), watcher_config())
}

pub async fn reconcile(_obj: Arc<AsyncExternPolicy>, ctx: Arc<Context>) -> Result<Action, Error> {
    Ok(Action::requeue(ctx.config.resync))
}
