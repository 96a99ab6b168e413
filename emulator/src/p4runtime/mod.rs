//! P4Runtime front end: the `p4.v1.P4Runtime` service and p4fleet's bulk
//! extension over the emulated devices, with semantics taken from the
//! P4Info a client sets.

pub(crate) mod arbitration;
pub(crate) mod bulk;
mod device;
pub(crate) mod entry;
pub(crate) mod pipeline;
mod pipeline_config;
pub(crate) mod schema;
pub(crate) mod service;
pub(crate) mod wire;

pub(crate) use device::P4RuntimeDevice;
