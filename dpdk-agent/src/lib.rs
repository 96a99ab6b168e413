//! p4fleet's DPDK host agent: serves P4Runtime and
//! `p4fleet.externs.v1.ExternRuntime` for one device, a real DPDK SWX
//! pipeline (Debian's DPDK 22.11, linked through the C shim in
//! `shim/p4fa.c`). docs/dpdk.md, "The DPDK host agent".

pub mod bind;
pub mod device;
pub mod eal;
pub mod extern_runtime;
pub mod externs;
pub mod ffi;
pub mod p4runtime;
pub mod pipeline;
pub mod policy;

use std::ffi::CString;

/// libdpdk's cflags and the internal pipeline headers the agent was
/// built against (what it compiles generated pipelines with).
pub const DPDK_CFLAGS: &str = env!("P4FLEET_DPDK_CFLAGS");
pub const DPDK_PIPELINE_INCLUDE: &str = env!("P4FLEET_DPDK_PIPELINE_INCLUDE");
pub const DPDK_VERSION: &str = env!("P4FLEET_DPDK_VERSION");

fn cstr(s: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("{s:?} has a NUL"))
}

/// Creates the packet buffer pool of the input ports.
pub fn create_mempool(name: &str, n: u32, data_room: u32) -> Result<(), String> {
    // SAFETY: valid C string; the EAL is initialized.
    let st = unsafe { ffi::p4fa_pktmbuf_pool_create(cstr(name)?.as_ptr(), n, 256, data_room, 0) };
    if st != 0 {
        return Err(format!("mempool {name}: {}", ffi::strerror(st)));
    }
    Ok(())
}

/// Creates a single-producer single-consumer rte_ring.
pub fn create_ring(name: &str, count: u32) -> Result<(), String> {
    // SAFETY: as above.
    let st = unsafe { ffi::p4fa_ring_create(cstr(name)?.as_ptr(), count, 0) };
    if st != 0 {
        return Err(format!("ring {name}: {}", ffi::strerror(st)));
    }
    Ok(())
}

/// Starts crypto device `name` (given to the EAL as `--vdev`) with the
/// crypto externs' key and IV, for the InlineCryptoDevice executor.
pub fn start_crypto_device(name: &str) -> Result<(), String> {
    // SAFETY: valid C string, 16-byte key and IV; the EAL is initialized.
    let st = unsafe {
        ffi::p4fa_cdev_init(
            cstr(name)?.as_ptr(),
            externs::KEY.as_ptr(),
            externs::IV.as_ptr(),
            2048,
        )
    };
    if st != 0 {
        return Err(format!("crypto device {name}: {}", ffi::strerror(st)));
    }
    Ok(())
}

/// Configures and starts an ethdev (one rx and one tx queue).
pub fn start_ethdev(name: &str, mempool: &str) -> Result<(), String> {
    // SAFETY: as above.
    let st = unsafe { ffi::p4fa_ethdev_start(cstr(name)?.as_ptr(), cstr(mempool)?.as_ptr(), 1024) };
    if st != 0 {
        return Err(format!("ethdev {name}: {}", ffi::strerror(st)));
    }
    Ok(())
}
