//! Switch reconciler (placeholder while the shared pieces land).
use std::sync::Arc;

use kube::runtime::controller::{Action, Controller};
use p4fleet_crds::Switch;

use super::{Error, watcher_config};
use crate::context::Context;

pub fn controller(ctx: &Context) -> Controller<Switch> {
    Controller::new(ctx.all::<Switch>(), watcher_config())
}

pub async fn reconcile(_obj: Arc<Switch>, ctx: Arc<Context>) -> Result<Action, Error> {
    Ok(Action::requeue(ctx.config.resync))
}
