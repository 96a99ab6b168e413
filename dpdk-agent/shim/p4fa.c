/* SPDX-License-Identifier: Apache-2.0
 *
 * p4fleet-dpdk-agent's C shim: the narrow C ABI the agent's Rust code
 * declares by hand (src/ffi.rs) over Debian's DPDK 22.11 (EAL, mempools, the
 * SWX pipeline and its control API). It holds no logic of its own beyond
 * what C is needed for: DPDK structures stay on this side, Rust sees
 * integers, strings and opaque pointers.
 *
 * One piece is not a wrapper: rte_swx_pipeline_config() is defined here and
 * interposes on DPDK's own (the agent binary exports it, see build.rs).
 * rte_swx_pipeline_codegen() and rte_swx_pipeline_build_from_lib() each
 * create their pipeline internally and configure it from the .spec at once;
 * an `extern f.NAME` instruction needs NAME registered before that, and
 * 22.11 offers no hook. So this definition calls DPDK's (dlvsym, RTLD_NEXT)
 * and then registers the extern functions the agent set with
 * p4fa_externs_set(). docs/dpdk.md, "The DPDK host agent".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>
#include <rte_swx_ctl.h>
#include <rte_swx_pipeline.h>

#define P4FA_MAX_EXTERNS 16
#define P4FA_MAX_FIELDS 16
#define P4FA_NAME 64

typedef int (*p4fa_extern_fn)(void *mailbox);

static struct {
	char mailbox[P4FA_NAME];
	char field_names[P4FA_MAX_FIELDS][P4FA_NAME];
	struct rte_swx_field_params fields[P4FA_MAX_FIELDS];
	uint32_t n_fields;
	char names[P4FA_MAX_EXTERNS][P4FA_NAME];
	p4fa_extern_fn fns[P4FA_MAX_EXTERNS];
	uint32_t n;
	int last_status;
} externs;

/* ---- EAL ------------------------------------------------------------- */

int p4fa_eal_init(int argc, char **argv)
{
	int n = rte_eal_init(argc, argv);

	return n < 0 ? -rte_errno : n;
}

const char *p4fa_strerror(int err)
{
	return rte_strerror(err < 0 ? -err : err);
}

unsigned int p4fa_lcore_count(void)
{
	return rte_lcore_count();
}

int p4fa_pktmbuf_pool_create(const char *name, uint32_t n, uint32_t cache, uint32_t data_room,
			     int socket)
{
	struct rte_mempool *mp = rte_pktmbuf_pool_create(name, n, cache, 0, data_room, socket);

	return mp ? 0 : -rte_errno;
}

int p4fa_ring_create(const char *name, uint32_t count, int socket)
{
	struct rte_ring *r = rte_ring_create(name, count, socket, RING_F_SP_ENQ | RING_F_SC_DEQ);

	return r ? 0 : -rte_errno;
}

/* ---- extern functions ---------------------------------------------- */

/* The mailbox struct type and the extern functions every pipeline built
 * from now on gets. Copies everything. */
int p4fa_externs_set(const char *mailbox, const char *const *field_names,
		     const uint32_t *field_bits, uint32_t n_fields, const char *const *names,
		     const p4fa_extern_fn *fns, uint32_t n)
{
	uint32_t i;

	if (n_fields > P4FA_MAX_FIELDS || n > P4FA_MAX_EXTERNS || strlen(mailbox) >= P4FA_NAME)
		return -EINVAL;
	snprintf(externs.mailbox, P4FA_NAME, "%s", mailbox);
	for (i = 0; i < n_fields; i++) {
		if (strlen(field_names[i]) >= P4FA_NAME)
			return -EINVAL;
		snprintf(externs.field_names[i], P4FA_NAME, "%s", field_names[i]);
		externs.fields[i].name = externs.field_names[i];
		externs.fields[i].n_bits = field_bits[i];
	}
	externs.n_fields = n_fields;
	for (i = 0; i < n; i++) {
		if (strlen(names[i]) >= P4FA_NAME)
			return -EINVAL;
		snprintf(externs.names[i], P4FA_NAME, "%s", names[i]);
		externs.fns[i] = fns[i];
	}
	externs.n = n;
	return 0;
}

/* The status of the last extern registration (0 or a negative errno), for
 * telling a refused registration from a refused .spec. */
int p4fa_externs_last_status(void)
{
	return externs.last_status;
}

typedef int (*config_fn)(struct rte_swx_pipeline **, const char *, int);

int rte_swx_pipeline_config(struct rte_swx_pipeline **p, const char *name, int numa_node)
{
	static config_fn real;
	uint32_t i;
	int status;

	if (!real) {
		real = (config_fn)dlvsym(RTLD_NEXT, "rte_swx_pipeline_config", "EXPERIMENTAL");
		if (!real)
			return -ENOSYS;
	}
	status = real(p, name, numa_node);
	if (status || !externs.n)
		return status;
	status = rte_swx_pipeline_struct_type_register(*p, externs.mailbox, externs.fields,
						       externs.n_fields, 0);
	for (i = 0; !status && i < externs.n; i++)
		status = rte_swx_pipeline_extern_func_register(*p, externs.names[i],
							       externs.mailbox, externs.fns[i]);
	externs.last_status = status;
	if (status) {
		rte_swx_pipeline_free(*p);
		*p = NULL;
	}
	return status;
}

/* ---- pipeline -------------------------------------------------------- */

/* .spec -> C. On error, the spec line (0 = not a line) and DPDK's message. */
int p4fa_codegen(const char *spec_path, const char *c_path, uint32_t *err_line, char *err_msg,
		 size_t err_len)
{
	const char *msg = NULL;
	FILE *spec, *code;
	int status;

	*err_line = 0;
	err_msg[0] = 0;
	spec = fopen(spec_path, "r");
	if (!spec)
		return -errno;
	code = fopen(c_path, "w");
	if (!code) {
		status = -errno;
		fclose(spec);
		return status;
	}
	externs.last_status = 0;
	status = rte_swx_pipeline_codegen(spec, code, err_line, &msg);
	fclose(spec);
	if (fclose(code) && !status)
		status = -errno;
	if (msg)
		snprintf(err_msg, err_len, "%s", msg);
	return status;
}

int p4fa_build_from_lib(const char *name, const char *lib_path, const char *iospec_path, int numa,
			struct rte_swx_pipeline **out)
{
	FILE *io = fopen(iospec_path, "r");
	int status;

	*out = NULL;
	if (!io)
		return -errno;
	externs.last_status = 0;
	status = rte_swx_pipeline_build_from_lib(out, name, lib_path, io, numa);
	fclose(io);
	return status;
}

void p4fa_pipeline_free(struct rte_swx_pipeline *p)
{
	rte_swx_pipeline_free(p);
}

static uint64_t p4fa_rx_total(struct rte_swx_pipeline *p, uint32_t n_in)
{
	struct rte_swx_port_in_stats s;
	uint64_t n = 0;
	uint32_t i;

	for (i = 0; i < n_in; i++) {
		memset(&s, 0, sizeof(s));
		rte_swx_ctl_pipeline_port_in_stats_read(p, i, &s);
		n += s.n_pkts;
	}
	return n;
}

static double p4fa_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

/* The data plane loop: runs the pipeline until *stop is non-zero, then
 * flushes its output ports. While *pause is non-zero it idles without
 * running the pipeline (and sets *paused). rate_pps > 0 paces what the
 * input ports deliver (tests and demos on shared machines; a real switch
 * runs with 0, a core busy polling). */
void p4fa_run(struct rte_swx_pipeline *p, volatile uint32_t *stop, volatile uint32_t *pause,
	      volatile uint32_t *paused, uint64_t rate_pps, uint32_t n_instructions)
{
	struct rte_swx_ctl_pipeline_info info;
	double t0 = p4fa_now();
	uint64_t rx0;

	memset(&info, 0, sizeof(info));
	rte_swx_ctl_pipeline_info_get(p, &info);
	rx0 = p4fa_rx_total(p, info.n_ports_in);
	while (!__atomic_load_n(stop, __ATOMIC_ACQUIRE)) {
		uint32_t i;

		if (__atomic_load_n(pause, __ATOMIC_ACQUIRE)) {
			rte_swx_pipeline_flush(p);
			__atomic_store_n(paused, 1, __ATOMIC_RELEASE);
			usleep(50);
			continue;
		}
		__atomic_store_n(paused, 0, __ATOMIC_RELEASE);
		for (i = 0; i < 64; i++)
			rte_swx_pipeline_run(p, n_instructions);
		if (rate_pps) {
			double due = (double)(p4fa_rx_total(p, info.n_ports_in) - rx0) / rate_pps;
			double ahead = due - (p4fa_now() - t0);

			if (ahead > 0.0002) {
				rte_swx_pipeline_flush(p);
				usleep((useconds_t)(ahead * 1e6));
			}
		}
	}
	rte_swx_pipeline_flush(p);
}

/* ---- pipeline info ------------------------------------------------ */

int p4fa_info(struct rte_swx_pipeline *p, uint32_t *n_ports_in, uint32_t *n_ports_out,
	      uint32_t *n_tables, uint32_t *n_actions)
{
	struct rte_swx_ctl_pipeline_info info;
	int status = rte_swx_ctl_pipeline_info_get(p, &info);

	if (status)
		return status;
	*n_ports_in = info.n_ports_in;
	*n_ports_out = info.n_ports_out;
	*n_tables = info.n_tables;
	*n_actions = info.n_actions;
	return 0;
}

int p4fa_action_info(struct rte_swx_pipeline *p, uint32_t action_id, char *name, size_t len,
		     uint32_t *n_args)
{
	struct rte_swx_ctl_action_info a;
	int status = rte_swx_ctl_action_info_get(p, action_id, &a);

	if (status)
		return status;
	snprintf(name, len, "%s", a.name);
	*n_args = a.n_args;
	return 0;
}

int p4fa_action_arg_info(struct rte_swx_pipeline *p, uint32_t action_id, uint32_t arg_id,
			 char *name, size_t len, uint32_t *n_bits)
{
	struct rte_swx_ctl_action_arg_info a;
	int status = rte_swx_ctl_action_arg_info_get(p, action_id, arg_id, &a);

	if (status)
		return status;
	snprintf(name, len, "%s", a.name);
	*n_bits = a.n_bits;
	return 0;
}

int p4fa_table_info(struct rte_swx_pipeline *p, uint32_t table_id, char *name, size_t len,
		    uint32_t *n_match_fields, uint32_t *n_actions, int *default_is_const,
		    uint32_t *size)
{
	struct rte_swx_ctl_table_info t;
	int status = rte_swx_ctl_table_info_get(p, table_id, &t);

	if (status)
		return status;
	snprintf(name, len, "%s", t.name);
	*n_match_fields = t.n_match_fields;
	*n_actions = t.n_actions;
	*default_is_const = t.default_action_is_const;
	*size = t.size;
	return 0;
}

/* match_type: 0 wildcard, 1 lpm, 2 exact (enum rte_swx_table_match_type). */
int p4fa_table_match_field_info(struct rte_swx_pipeline *p, uint32_t table_id, uint32_t field_id,
				uint32_t *match_type, uint32_t *n_bits, int *is_header)
{
	struct rte_swx_ctl_table_match_field_info f;
	int status = rte_swx_ctl_table_match_field_info_get(p, table_id, field_id, &f);

	if (status)
		return status;
	*match_type = (uint32_t)f.match_type;
	*n_bits = f.n_bits;
	*is_header = f.is_header;
	return 0;
}

int p4fa_table_action_info(struct rte_swx_pipeline *p, uint32_t table_id,
			   uint32_t table_action_id, uint32_t *action_id, int *for_entries,
			   int *for_default)
{
	struct rte_swx_ctl_table_action_info a;
	int status = rte_swx_ctl_table_action_info_get(p, table_id, table_action_id, &a);

	if (status)
		return status;
	*action_id = a.action_id;
	*for_entries = a.action_is_for_table_entries;
	*for_default = a.action_is_for_default_entry;
	return 0;
}

/* ---- stats --------------------------------------------------------- */

int p4fa_port_in_stats(struct rte_swx_pipeline *p, uint32_t port, uint64_t *pkts,
		       uint64_t *bytes, uint64_t *empty)
{
	struct rte_swx_port_in_stats s;
	int status;

	memset(&s, 0, sizeof(s));
	status = rte_swx_ctl_pipeline_port_in_stats_read(p, port, &s);
	*pkts = s.n_pkts;
	*bytes = s.n_bytes;
	*empty = s.n_empty;
	return status;
}

int p4fa_port_out_stats(struct rte_swx_pipeline *p, uint32_t port, uint64_t *pkts,
			uint64_t *bytes, uint64_t *pkts_drop, uint64_t *bytes_drop)
{
	struct rte_swx_port_out_stats s;
	int status;

	memset(&s, 0, sizeof(s));
	status = rte_swx_ctl_pipeline_port_out_stats_read(p, port, &s);
	*pkts = s.n_pkts;
	*bytes = s.n_bytes;
	*pkts_drop = s.n_pkts_drop;
	*bytes_drop = s.n_bytes_drop;
	return status;
}

/* per_action: n_actions counters (the pipeline's action ids). */
int p4fa_table_stats(struct rte_swx_pipeline *p, const char *table, uint64_t *hit,
		     uint64_t *miss, uint64_t *per_action)
{
	struct rte_swx_table_stats s;
	int status;

	s.n_pkts_hit = 0;
	s.n_pkts_miss = 0;
	s.n_pkts_action = per_action;
	status = rte_swx_ctl_pipeline_table_stats_read(p, table, &s);
	*hit = s.n_pkts_hit;
	*miss = s.n_pkts_miss;
	return status;
}

/* ---- control API ---------------------------------------------------- */

struct rte_swx_ctl_pipeline *p4fa_ctl_create(struct rte_swx_pipeline *p)
{
	return rte_swx_ctl_pipeline_create(p);
}

void p4fa_ctl_free(struct rte_swx_ctl_pipeline *ctl)
{
	rte_swx_ctl_pipeline_free(ctl);
}

/* An entry from rte_swx_ctl_pipeline_table_entry_read() has no free
 * function in 22.11; its parts are malloc'ed. */
static void entry_free(struct rte_swx_table_entry *e)
{
	if (!e)
		return;
	free(e->key);
	free(e->key_mask);
	free(e->action_data);
	free(e);
}

#define P4FA_OP_ADD 0
#define P4FA_OP_DELETE 1
#define P4FA_OP_DEFAULT 2

/* Stages one change of `table` for the next commit. `line` is an entry in
 * DPDK's own text format ("match V[/M]... [priority P] action A [ARG V]...";
 * a default entry is "action A ..."), parsed by DPDK. -EBADMSG: DPDK did not
 * parse the line; otherwise the control API's status. */
int p4fa_table_op(struct rte_swx_ctl_pipeline *ctl, const char *table, const char *line, int op)
{
	struct rte_swx_table_entry *e;
	int blank = 0, status;

	e = rte_swx_ctl_pipeline_table_entry_read(ctl, table, line, &blank);
	if (!e)
		return -EBADMSG;
	switch (op) {
	case P4FA_OP_ADD:
		status = rte_swx_ctl_pipeline_table_entry_add(ctl, table, e);
		break;
	case P4FA_OP_DELETE:
		status = rte_swx_ctl_pipeline_table_entry_delete(ctl, table, e);
		break;
	case P4FA_OP_DEFAULT:
		status = rte_swx_ctl_pipeline_table_default_entry_add(ctl, table, e);
		break;
	default:
		status = -EINVAL;
	}
	entry_free(e);
	return status;
}

int p4fa_commit(struct rte_swx_ctl_pipeline *ctl, int abort_on_fail)
{
	return rte_swx_ctl_pipeline_commit(ctl, abort_on_fail);
}

void p4fa_abort(struct rte_swx_ctl_pipeline *ctl)
{
	rte_swx_ctl_pipeline_abort(ctl);
}

/* ---- ethdev ports ------------------------------------------------------ */

#include <rte_ethdev.h>

/* Configures and starts ethdev `name` (a NIC bound to a DPDK driver or a
 * --vdev) with one rx and one tx queue, rx buffers from mempool `pool`,
 * promiscuous: what the pipeline's `ethdev` ports expect to find. */
int p4fa_ethdev_start(const char *name, const char *pool, uint16_t descriptors)
{
	struct rte_eth_conf conf;
	struct rte_mempool *mp = rte_mempool_lookup(pool);
	uint16_t port;
	int status, socket;

	if (!mp)
		return -ENOENT;
	status = rte_eth_dev_get_port_by_name(name, &port);
	if (status)
		return status;
	socket = rte_eth_dev_socket_id(port);
	if (socket < 0)
		socket = 0;
	memset(&conf, 0, sizeof(conf));
	status = rte_eth_dev_configure(port, 1, 1, &conf);
	if (status)
		return status;
	status = rte_eth_rx_queue_setup(port, 0, descriptors, socket, NULL, mp);
	if (status)
		return status;
	status = rte_eth_tx_queue_setup(port, 0, descriptors, socket, NULL);
	if (status)
		return status;
	status = rte_eth_dev_start(port);
	if (status)
		return status;
	rte_eth_promiscuous_enable(port);
	return 0;
}

/* ---- crypto device: the InlineCryptoDevice executor --------------------- */

#include <rte_crypto.h>
#include <rte_cryptodev.h>

#define P4FA_IV_OFF (sizeof(struct rte_crypto_op) + sizeof(struct rte_crypto_sym_op))
#define P4FA_CDEV_PENDING 1024
#define P4FA_DONE 2

/* The agent's mailbox (src/externs.rs, MAILBOX_FIELDS): one AES block as
 * two numbers (its bytes in network order) and the call's state. */
struct p4fa_mailbox {
	uint64_t w0;
	uint64_t w1;
	uint64_t state;
};

static struct {
	int ready;
	uint8_t dev;
	void *sess[2];
	struct rte_mempool *ops;
	struct rte_mempool *mbufs;
	uint8_t iv[16];
	struct rte_crypto_op *pending[P4FA_CDEV_PENDING];
	uint32_t n_pending;
	uint64_t submitted;
	uint64_t completed;
	uint64_t failed;
} cdev;

/* Configures and starts crypto device `name` (a software PMD given to the
 * EAL as --vdev, e.g. crypto_openssl0 or crypto_aesni_mb0): one queue
 * pair, AES-128-CBC sessions to encrypt and decrypt with `key`, pools
 * for `n_ops` operations in flight. */
int p4fa_cdev_init(const char *name, const uint8_t *key, const uint8_t *iv, uint32_t n_ops)
{
	struct rte_cryptodev_config conf = {.socket_id = 0, .nb_queue_pairs = 1};
	struct rte_crypto_sym_xform x;
	struct rte_cryptodev_qp_conf qp;
	struct rte_mempool *sessions;
	uint8_t key_copy[16];
	int id, status, i;

	id = rte_cryptodev_get_dev_id(name);
	if (id < 0)
		return -ENODEV;
	cdev.dev = (uint8_t)id;
	status = rte_cryptodev_configure(cdev.dev, &conf);
	if (status)
		return status;
	sessions = rte_cryptodev_sym_session_pool_create(
		"P4FA_CSESS", 4, rte_cryptodev_sym_get_private_session_size(cdev.dev), 0, 0, 0);
	if (!sessions)
		return -rte_errno;
	qp.nb_descriptors = n_ops;
	qp.mp_session = sessions;
	status = rte_cryptodev_queue_pair_setup(cdev.dev, 0, &qp, 0);
	if (status)
		return status;
	status = rte_cryptodev_start(cdev.dev);
	if (status)
		return status;
	memcpy(key_copy, key, 16);
	memcpy(cdev.iv, iv, 16);
	for (i = 0; i < 2; i++) {
		memset(&x, 0, sizeof(x));
		x.type = RTE_CRYPTO_SYM_XFORM_CIPHER;
		x.cipher.op = i ? RTE_CRYPTO_CIPHER_OP_DECRYPT : RTE_CRYPTO_CIPHER_OP_ENCRYPT;
		x.cipher.algo = RTE_CRYPTO_CIPHER_AES_CBC;
		x.cipher.key.data = key_copy;
		x.cipher.key.length = 16;
		x.cipher.iv.offset = P4FA_IV_OFF;
		x.cipher.iv.length = 16;
		cdev.sess[i] = rte_cryptodev_sym_session_create(cdev.dev, &x, sessions);
		if (!cdev.sess[i])
			return -rte_errno;
	}
	/* IV, then the mailbox pointer, in each op's private area. */
	cdev.ops = rte_crypto_op_pool_create("P4FA_COPS", RTE_CRYPTO_OP_TYPE_SYMMETRIC, n_ops, 0,
					     16 + sizeof(void *), 0);
	if (!cdev.ops)
		return -rte_errno;
	cdev.mbufs = rte_pktmbuf_pool_create("P4FA_CMBUF", n_ops, 0, 0,
					     RTE_PKTMBUF_HEADROOM + 64, 0);
	if (!cdev.mbufs)
		return -rte_errno;
	cdev.ready = 1;
	return 0;
}

static void cdev_flush(void)
{
	uint16_t n;

	if (!cdev.n_pending)
		return;
	n = rte_cryptodev_enqueue_burst(cdev.dev, 0, cdev.pending, (uint16_t)cdev.n_pending);
	if (n && n < cdev.n_pending)
		memmove(cdev.pending, cdev.pending + n, (cdev.n_pending - n) * sizeof(void *));
	cdev.n_pending -= n;
}

/* Queues the mailbox's block for the device (encrypt, or decrypt when
 * `decrypt`); operations go to the device `burst` at a time (and at every
 * poll). -ENOBUFS: no free operation now (ask again later). Called from
 * the pipeline's thread only. */
int p4fa_cdev_submit(void *mailbox, int decrypt, uint32_t burst)
{
	struct p4fa_mailbox *mb = mailbox;
	struct rte_crypto_op *op;
	struct rte_mbuf *m;
	uint64_t w[2];
	uint8_t *p;

	if (!cdev.ready)
		return -ENODEV;
	if (cdev.n_pending >= P4FA_CDEV_PENDING)
		return -ENOBUFS;
	op = rte_crypto_op_alloc(cdev.ops, RTE_CRYPTO_OP_TYPE_SYMMETRIC);
	if (!op)
		return -ENOBUFS;
	m = rte_pktmbuf_alloc(cdev.mbufs);
	if (!m) {
		rte_crypto_op_free(op);
		return -ENOBUFS;
	}
	w[0] = rte_cpu_to_be_64(mb->w0);
	w[1] = rte_cpu_to_be_64(mb->w1);
	memcpy(rte_pktmbuf_append(m, 16), w, 16);
	rte_crypto_op_attach_sym_session(op, cdev.sess[decrypt ? 1 : 0]);
	op->sym->m_src = m;
	op->sym->cipher.data.offset = 0;
	op->sym->cipher.data.length = 16;
	p = rte_crypto_op_ctod_offset(op, uint8_t *, P4FA_IV_OFF);
	memcpy(p, cdev.iv, 16);
	memcpy(p + 16, &mb, sizeof(mb));
	cdev.pending[cdev.n_pending++] = op;
	cdev.submitted++;
	if (cdev.n_pending >= burst)
		cdev_flush();
	return 0;
}

/* Sends what is queued, takes what the device finished: each result goes
 * back into its mailbox, which is marked done. Returns how many finished. */
uint32_t p4fa_cdev_poll(void)
{
	struct rte_crypto_op *done[64];
	uint16_t n, i;
	uint32_t total = 0;

	if (!cdev.ready)
		return 0;
	cdev_flush();
	do {
		n = rte_cryptodev_dequeue_burst(cdev.dev, 0, done, 64);
		for (i = 0; i < n; i++) {
			struct rte_crypto_op *op = done[i];
			struct rte_mbuf *m = op->sym->m_src;
			struct p4fa_mailbox *mb;
			uint64_t w[2];

			memcpy(&mb, rte_crypto_op_ctod_offset(op, uint8_t *, P4FA_IV_OFF + 16),
			       sizeof(mb));
			if (op->status == RTE_CRYPTO_OP_STATUS_SUCCESS) {
				memcpy(w, rte_pktmbuf_mtod(m, uint8_t *), 16);
				mb->w0 = rte_be_to_cpu_64(w[0]);
				mb->w1 = rte_be_to_cpu_64(w[1]);
			} else {
				cdev.failed++;
			}
			__atomic_store_n(&mb->state, P4FA_DONE, __ATOMIC_RELEASE);
			rte_pktmbuf_free(m);
			rte_crypto_op_free(op);
		}
		total += n;
	} while (n == 64);
	cdev.completed += total;
	return total;
}

/* Operations submitted and not finished; operations the device failed. */
uint64_t p4fa_cdev_in_flight(void)
{
	return cdev.submitted - cdev.completed;
}

uint64_t p4fa_cdev_failed(void)
{
	return cdev.failed;
}
