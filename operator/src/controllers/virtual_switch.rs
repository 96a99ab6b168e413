//! VirtualSwitch reconciler (placeholder while the shared pieces land).
use std::sync::Arc;

use kube::runtime::controller::{Action, Controller};
use p4fleet_crds::VirtualSwitch;

use super::{Error, scoped_api, watcher_config};
use crate::context::Context;

pub fn controller(ctx: &Context) -> Controller<VirtualSwitch> {
    Controller::new(scoped_api::<VirtualSwitch>(ctx), watcher_config())
}

pub async fn reconcile(_obj: Arc<VirtualSwitch>, ctx: Arc<Context>) -> Result<Action, Error> {
    Ok(Action::requeue(ctx.config.resync))
}
