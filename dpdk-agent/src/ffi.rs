//! The C shim's ABI (shim/p4fa.c), declared by hand: integers, C strings
//! and opaque pointers only. Negative return values are `-errno`.

use std::ffi::{c_char, c_int, c_void};

/// `struct rte_swx_pipeline` (opaque).
#[repr(C)]
pub struct Pipeline {
    _private: [u8; 0],
}

/// `struct rte_swx_ctl_pipeline` (opaque).
#[repr(C)]
pub struct Ctl {
    _private: [u8; 0],
}

/// `rte_swx_extern_func_t`: 1 = done, 0 = not yet (call again with the
/// same mailbox).
pub type ExternFn = unsafe extern "C" fn(mailbox: *mut c_void) -> c_int;

pub const OP_ADD: c_int = 0;
pub const OP_DELETE: c_int = 1;
pub const OP_DEFAULT: c_int = 2;

/// `enum rte_swx_table_match_type`.
pub const MATCH_WILDCARD: u32 = 0;
pub const MATCH_LPM: u32 = 1;
pub const MATCH_EXACT: u32 = 2;

unsafe extern "C" {
    pub fn p4fa_eal_init(argc: c_int, argv: *mut *mut c_char) -> c_int;
    pub fn p4fa_strerror(err: c_int) -> *const c_char;
    pub fn p4fa_lcore_count() -> u32;
    pub fn p4fa_pktmbuf_pool_create(
        name: *const c_char,
        n: u32,
        cache: u32,
        data_room: u32,
        socket: c_int,
    ) -> c_int;
    pub fn p4fa_ring_create(name: *const c_char, count: u32, socket: c_int) -> c_int;
    pub fn p4fa_ethdev_start(name: *const c_char, pool: *const c_char, descriptors: u16) -> c_int;

    pub fn p4fa_externs_set(
        mailbox: *const c_char,
        field_names: *const *const c_char,
        field_bits: *const u32,
        n_fields: u32,
        names: *const *const c_char,
        fns: *const ExternFn,
        n: u32,
    ) -> c_int;
    pub fn p4fa_externs_last_status() -> c_int;

    pub fn p4fa_codegen(
        spec_path: *const c_char,
        c_path: *const c_char,
        err_line: *mut u32,
        err_msg: *mut c_char,
        err_len: usize,
    ) -> c_int;
    pub fn p4fa_build_from_lib(
        name: *const c_char,
        lib_path: *const c_char,
        iospec_path: *const c_char,
        numa: c_int,
        out: *mut *mut Pipeline,
    ) -> c_int;
    pub fn p4fa_pipeline_free(p: *mut Pipeline);
    pub fn p4fa_run(
        p: *mut Pipeline,
        stop: *const u32,
        pause: *const u32,
        paused: *mut u32,
        rate_pps: u64,
        n_instructions: u32,
    );

    pub fn p4fa_info(
        p: *mut Pipeline,
        n_ports_in: *mut u32,
        n_ports_out: *mut u32,
        n_tables: *mut u32,
        n_actions: *mut u32,
    ) -> c_int;
    pub fn p4fa_action_info(
        p: *mut Pipeline,
        action_id: u32,
        name: *mut c_char,
        len: usize,
        n_args: *mut u32,
    ) -> c_int;
    pub fn p4fa_action_arg_info(
        p: *mut Pipeline,
        action_id: u32,
        arg_id: u32,
        name: *mut c_char,
        len: usize,
        n_bits: *mut u32,
    ) -> c_int;
    pub fn p4fa_table_info(
        p: *mut Pipeline,
        table_id: u32,
        name: *mut c_char,
        len: usize,
        n_match_fields: *mut u32,
        n_actions: *mut u32,
        default_is_const: *mut c_int,
        size: *mut u32,
    ) -> c_int;
    pub fn p4fa_table_match_field_info(
        p: *mut Pipeline,
        table_id: u32,
        field_id: u32,
        match_type: *mut u32,
        n_bits: *mut u32,
        is_header: *mut c_int,
    ) -> c_int;
    pub fn p4fa_table_action_info(
        p: *mut Pipeline,
        table_id: u32,
        table_action_id: u32,
        action_id: *mut u32,
        for_entries: *mut c_int,
        for_default: *mut c_int,
    ) -> c_int;

    pub fn p4fa_port_in_stats(
        p: *mut Pipeline,
        port: u32,
        pkts: *mut u64,
        bytes: *mut u64,
        empty: *mut u64,
    ) -> c_int;
    pub fn p4fa_port_out_stats(
        p: *mut Pipeline,
        port: u32,
        pkts: *mut u64,
        bytes: *mut u64,
        pkts_drop: *mut u64,
        bytes_drop: *mut u64,
    ) -> c_int;
    pub fn p4fa_table_stats(
        p: *mut Pipeline,
        table: *const c_char,
        hit: *mut u64,
        miss: *mut u64,
        per_action: *mut u64,
    ) -> c_int;

    pub fn p4fa_ctl_create(p: *mut Pipeline) -> *mut Ctl;
    pub fn p4fa_ctl_free(ctl: *mut Ctl);
    pub fn p4fa_table_op(
        ctl: *mut Ctl,
        table: *const c_char,
        line: *const c_char,
        op: c_int,
    ) -> c_int;
    pub fn p4fa_commit(ctl: *mut Ctl, abort_on_fail: c_int) -> c_int;
    pub fn p4fa_abort(ctl: *mut Ctl);

    pub fn p4fa_cdev_init(name: *const c_char, key: *const u8, iv: *const u8, n_ops: u32) -> c_int;
    pub fn p4fa_cdev_submit(mailbox: *mut c_void, decrypt: c_int, burst: u32) -> c_int;
    pub fn p4fa_cdev_poll() -> u32;
    pub fn p4fa_cdev_in_flight() -> u64;
    pub fn p4fa_cdev_failed() -> u64;
}

/// DPDK's text for an error code (negative or positive errno).
pub fn strerror(err: c_int) -> String {
    // SAFETY: rte_strerror returns a pointer to a static or thread-local
    // NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(p4fa_strerror(err)) }
        .to_string_lossy()
        .into_owned()
}

/// A C string buffer's content up to its NUL.
pub fn c_buf_to_string(buf: &[u8]) -> String {
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
