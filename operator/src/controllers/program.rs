//! P4Program reconciler (placeholder while the shared pieces land).
use std::sync::Arc;

use kube::runtime::controller::{Action, Controller};
use p4fleet_crds::P4Program;

use super::{Error, scoped_api, watcher_config};
use crate::context::Context;

pub fn controller(ctx: &Context) -> Controller<P4Program> {
    Controller::new(scoped_api::<P4Program>(ctx), watcher_config())
}

pub async fn reconcile(_obj: Arc<P4Program>, ctx: Arc<Context>) -> Result<Action, Error> {
    Ok(Action::requeue(ctx.config.resync))
}
