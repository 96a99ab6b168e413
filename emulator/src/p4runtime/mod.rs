//! P4Runtime front end: the `p4.v1.P4Runtime` service and p4fleet's bulk
//! extension over the emulated devices.

pub(crate) mod bulk;
pub(crate) mod entry;
pub(crate) mod pipeline;
pub(crate) mod schema;
pub(crate) mod service;
pub(crate) mod wire;
