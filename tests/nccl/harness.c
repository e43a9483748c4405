/*
 * NCCL net plugin harness: drives a net plugin (libnccl-net-rdmesh.so) the way NCCL does,
 * without NCCL, across 1 to 3 processes on one host. Used by tests/tests/nccl_plugin_harness.rs.
 *
 * Usage: harness PLUGIN_SO SCENARIO [VERSIONS]
 *   SCENARIO  load | props | selfloop | sizes | smaller | grouped | inflight | threads |
 *             close_inflight | reuse_listen | oversize | ring | multi_ctx | reload
 *   VERSIONS  comma list of net ABI versions to drive, default 8,9,10,11,12; every scenario runs
 *             once per version in fresh processes (each process dlopens the plugin itself).
 * Environment:
 *   HX_TIMEOUT_S      limit for any one wait (connect/accept/test/post), default 60
 *   HX_SCENARIO_S     limit for one scenario run (all its processes), default 300
 *   HX_BLOCK_MS       a single listen/connect/accept call taking longer fails, default 2000
 *   HX_MAX_SIZE       largest transfer of the sizes scenario, bytes, default 8 MiB
 *   HX_LOG_LEVEL      plugin log lines printed (NCCL levels: 2 WARN, 3 INFO, 5 TRACE), default 3
 *   HX_RANK_ENV       NAME=VALUE set in each rank's process before it loads the plugin, every
 *                     "%r" in VALUE replaced by rank + 1 (e.g. RDMESH_NICS=lo=127.0.93.%r/24 to
 *                     give each rank its own loopback address)
 *   HX_TRACE          latency scenario: PREFIX of a per-rank file PREFIX.<rank> with the rank's
 *                     pid on its first line ("pid N") and one line per round trip: the turn, then
 *                     CLOCK_MONOTONIC seconds when its receive completed, its next irecv
 *                     returned, its isend was called and returned (what
 *                     scripts/bench/plugin-legs.py lines up with a perf record of the run)
 * Exit status 0 when every run of the scenario passed; each failure prints a line with "FAIL".
 * Build: cc -O2 -Wall -Wextra -Werror -pthread -o harness harness.c -ldl -lm
 *
 * Scenarios (ranks are forked processes; handles travel over socketpairs, as NCCL's bootstrap):
 *   load            this process: each version's symbol (an STT_OBJECT of the table's size),
 *                   name "rdmesh", every function NCCL calls non-NULL
 *   props           getProperties of every device inside a 0xEE-filled buffer: every field
 *                   written, nothing past the version's struct, values NCCL accepts, guids distinct
 *   selfloop        1 rank connects to its own listen handle from one thread, 0..1 MiB checked
 *   sizes           2 ranks, both directions at once: 0 B .. HX_MAX_SIZE, odd offsets, the
 *                   NCCL_NET_OPTIONAL_RECV_COMPLETION preset (v9+), a NET log line per connection
 *   smaller         sends of 0 .. 1 MiB+63 into 1 MiB+64 receives: actual sizes, nothing past
 *   grouped         4 grouped receives of n = maxRecvs (<= 8) in flight, distinct tags, sends in
 *                   rotated tag order, empty parts: FIFO across groups, tags within a group
 *   inflight        32 receives posted without any test() (NULL = failure), then 32 sends; a
 *                   2000-message stream with a window of 32 requests each way
 *   threads         that stream on one thread while another opens, uses and closes 8 links
 *   close_inflight  deregMr + close with sends and receives in flight, with unmatched sends;
 *                   nothing written into buffers after close; a new connection still works
 *   reuse_listen    two connects with one handle, two accepts on one listen comm, kept apart
 *   oversize        a send larger than its receive: nothing written past it, requests end
 *   ring            3 ranks in a ring, data forwarded around it and checked at every step
 *   multi_ctx       two init contexts (v11+; one init below), finalize of one keeps the other
 *   reload          init, traffic, finalize, dlclose, dlopen again, three times (v11+)
 *
 * What NCCL does that the harness mirrors (NVIDIA/nccl src/transport/net.cc, src/plugin/net.cc,
 * summarised in the project's nccl-plugin reference §1-§2): dlopen(RTLD_NOW | RTLD_LOCAL);
 * dlsym("ncclNetPlugin_vN") of a data object; init (per communicator with a context for v11+);
 * devices; getProperties of every device; listen -> the 128-byte handle travels out of band ->
 * connect and accept polled from one thread until non-NULL (they must never block); closeListen
 * right after accept; regMr(NCCL_PTR_HOST) once per buffer and comm; irecv/isend posted and
 * retried while they return a NULL request; test until done, with the actual sizes; deregMr
 * before close; finalize (v11+); dlclose after the last communicator (NCCL >= 2.28).
 * The ABI structs come from net_abi.h, declared independently of the plugin's own.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sys/resource.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "net_abi.h"

#define MAX_RANKS 3
#define MAX_DEVS 64
#define MAX_GROUP 8
#define GUARD 256
#define TEST_SIZES 64
#define SENTINEL_REQ ((void *)0x3)
#define UNWRITTEN_SIZE (-7)

/* ---------- process state ---------- */

static const char *g_path;
static const char *g_scn = "main";
static int g_ver;
static int g_rank;
static int g_nranks = 1;
static int g_oob[MAX_RANKS] = {-1, -1, -1};
static double g_timeout = 60.0;
static double g_block_ms = 2000.0;
static int g_loglevel = HX_LOG_INFO;

static void *g_lib;
static const void *g_table;
static int g_ndev;
static uint64_t g_guid[MAX_DEVS];
static int g_max_recvs = 1;
static long g_log_lines, g_log_net_lines, g_prof_calls;
static long g_null_sends, g_null_recvs;
static double g_max_call_ms;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;
	printf("[%s v%d r%d] ", g_scn, g_ver, g_rank);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	char msg[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	printf("[%s v%d r%d] FAIL: %s\n", g_scn, g_ver, g_rank, msg);
	fflush(stdout);
	fprintf(stderr, "[%s v%d r%d] FAIL: %s\n", g_scn, g_ver, g_rank, msg);
	fflush(stderr);
	_exit(1);
}

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond))                                                                       \
			die(__VA_ARGS__);                                                          \
	} while (0)

#define NCALL(expr)                                                                                \
	do {                                                                                       \
		hx_result rc_ = (expr);                                                            \
		if (rc_ != HX_SUCCESS)                                                             \
			die("%s returned ncclResult %d (%s:%d)", #expr, rc_, __FILE__, __LINE__); \
	} while (0)

static double env_num(const char *name, double dflt)
{
	const char *v = getenv(name);
	return v && *v ? atof(v) : dflt;
}

/* ---------- NCCL's logger and profiler callback, as the plugin sees them ---------- */

static void hx_log(int level, unsigned long flags, const char *file, int line, const char *fmt,
		   ...)
{
	static const char *names[] = {"NONE", "VERSION", "WARN", "INFO", "ABORT", "TRACE"};
	char msg[2048];
	va_list ap;
	__atomic_add_fetch(&g_log_lines, 1, __ATOMIC_RELAXED);
	if (flags & HX_LOG_NET)
		__atomic_add_fetch(&g_log_net_lines, 1, __ATOMIC_RELAXED);
	if (level > g_loglevel)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt ? fmt : "(null fmt)", ap);
	va_end(ap);
	fprintf(stderr, "[%s v%d r%d] NCCL %s flags=0x%lx %s:%d %s\n", g_scn, g_ver, g_rank,
		level >= 0 && level <= 5 ? names[level] : "?", flags, file ? file : "?", line, msg);
	fflush(stderr);
}

static hx_result hx_prof(void **event_handle, int type, void *parent, int64_t plugin_id,
			 void *ext)
{
	(void)type;
	(void)parent;
	(void)plugin_id;
	(void)ext;
	__atomic_add_fetch(&g_prof_calls, 1, __ATOMIC_RELAXED);
	if (event_handle)
		*event_handle = NULL;
	return HX_SUCCESS;
}

/* ---------- data pattern ---------- */

static uint32_t mkseed(uint32_t a, uint32_t b, uint32_t c)
{
	return (a * 1000003u) ^ (b * 7919u) ^ (c * 131u) ^ 0x5eedu;
}

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 31;
	x *= 0xBF58476D1CE4E5B9ull;
	x ^= x >> 29;
	x *= 0x94D049BB133111EBull;
	x ^= x >> 32;
	return x;
}

static uint8_t pat(uint32_t seed, size_t i)
{
	uint64_t x = mix64(((uint64_t)seed << 40) ^ (i >> 3) ^ 0x9E3779B97F4A7C15ull);
	return (uint8_t)(x >> ((i & 7) * 8));
}

static void fill(unsigned char *p, size_t len, uint32_t seed)
{
	for (size_t w = 0; w < len; w += 8) {
		uint64_t x = mix64(((uint64_t)seed << 40) ^ (w >> 3) ^ 0x9E3779B97F4A7C15ull);
		for (size_t k = 0; k < 8 && w + k < len; k++)
			p[w + k] = (uint8_t)(x >> (k * 8));
	}
}

/* Offset of the first byte that differs from the pattern, or SIZE_MAX. */
static size_t first_bad(const unsigned char *p, size_t len, uint32_t seed)
{
	for (size_t w = 0; w < len; w += 8) {
		uint64_t x = mix64(((uint64_t)seed << 40) ^ (w >> 3) ^ 0x9E3779B97F4A7C15ull);
		for (size_t k = 0; k < 8 && w + k < len; k++)
			if (p[w + k] != (uint8_t)(x >> (k * 8)))
				return w + k;
	}
	return SIZE_MAX;
}

static void check_pattern(const unsigned char *p, size_t len, uint32_t seed, const char *what)
{
	size_t bad = first_bad(p, len, seed);
	if (bad != SIZE_MAX)
		die("%s: data mismatch at byte %zu of %zu: got 0x%02x, expected 0x%02x", what, bad,
		    len, p[bad], pat(seed, bad));
}

static void check_const(const unsigned char *p, size_t len, unsigned char v, const char *what)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != v)
			die("%s: byte %zu changed to 0x%02x (must stay 0x%02x)", what, i, p[i], v);
}

static unsigned char *xalloc(size_t len)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, len + GUARD) != 0 || !p)
		die("out of memory allocating %zu bytes", len);
	return p;
}

/* ---------- out of band (what NCCL's bootstrap does): socketpairs between ranks ---------- */

static void oob_send(int peer, const void *buf, size_t len)
{
	const char *p = buf;
	while (len) {
		ssize_t n = send(g_oob[peer], p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		CHECK(n > 0, "out-of-band write to rank %d: %s", peer, strerror(errno));
		p += n;
		len -= (size_t)n;
	}
}

static void oob_recv(int peer, void *buf, size_t len)
{
	char *p = buf;
	double end = now_s() + g_timeout;
	while (len) {
		ssize_t n = recv(g_oob[peer], p, len, MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
			CHECK(now_s() < end, "timed out after %.0f s waiting for rank %d out of band",
			      g_timeout, peer);
			usleep(1000);
			continue;
		}
		CHECK(n > 0, "out-of-band read from rank %d: %s", peer,
		      n == 0 ? "peer exited" : strerror(errno));
		p += n;
		len -= (size_t)n;
	}
}

static void barrier(void)
{
	char c = 'b';
	for (int r = 0; r < g_nranks; r++)
		if (r != g_rank)
			oob_send(r, &c, 1);
	for (int r = 0; r < g_nranks; r++)
		if (r != g_rank) {
			oob_recv(r, &c, 1);
			CHECK(c == 'b', "out-of-band barrier with rank %d out of step", r);
		}
}

/* ---------- the plugin, per version ---------- */

#define T8 ((const hx_net_v8 *)g_table)
#define T9 ((const hx_net_v9 *)g_table)
#define T10 ((const hx_net_v10 *)g_table)
#define T11 ((const hx_net_v11 *)g_table)
#define T12 ((const hx_net_v12 *)g_table)

/* Function members in table order; v8 stops before makeVDevice, v9/v10 before finalize. */
static const char *const fn_names[] = {"init",	      "devices",       "getProperties", "listen",
				       "connect",     "accept",	       "regMr",		"regMrDmaBuf",
				       "deregMr",     "isend",	       "irecv",		"iflush",
				       "test",	      "closeSend",     "closeRecv",	"closeListen",
				       "getDeviceMr", "irecvConsumed", "makeVDevice",	"finalize",
				       "setNetAttr"};

static int table_fns(int ver)
{
	return ver == 8 ? 18 : ver <= 10 ? 19 : 21;
}

static int fn_required(const char *name, int ver)
{
	static const char *const req[] = {"init",      "devices",   "getProperties", "listen",
					  "connect",   "accept",    "regMr",	     "deregMr",
					  "isend",     "irecv",	    "test",	     "closeSend",
					  "closeRecv", "closeListen"};
	for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
		if (!strcmp(req[i], name))
			return 1;
	return ver >= 11 && !strcmp(name, "finalize"); /* NCCL calls it without a NULL check */
}

static void *table_fn(int i)
{
	void *f;
	memcpy(&f, (const char *)g_table + 8 + 8 * i, sizeof f);
	return f;
}

/* dlopen + dlsym + the checks NCCL's loader makes. */
static void net_open(int quiet)
{
	char sym[32];
	dlerror();
	g_lib = dlopen(g_path, RTLD_NOW | RTLD_LOCAL);
	CHECK(g_lib, "dlopen(%s, RTLD_NOW | RTLD_LOCAL): %s", g_path, dlerror());
	snprintf(sym, sizeof sym, "ncclNetPlugin_v%d", g_ver);
	dlerror();
	g_table = dlsym(g_lib, sym);
	{
		const char *err = dlerror();
		CHECK(g_table, "dlsym(%s): %s", sym, err ? err : "NULL symbol");
	}
	{
		Dl_info info;
		ElfW(Sym) *es = NULL;
		if (dladdr1(g_table, &info, (void **)&es, RTLD_DL_SYMENT) && es) {
			CHECK(ELF64_ST_TYPE(es->st_info) == STT_OBJECT,
			      "%s is ELF symbol type %d, not a data object (STT_OBJECT)", sym,
			      ELF64_ST_TYPE(es->st_info));
			size_t want = g_ver == 8 ? sizeof(hx_net_v8)
				      : g_ver <= 10 ? sizeof(hx_net_v9)
						    : sizeof(hx_net_v11);
			CHECK(es->st_size == want, "%s has size %lu bytes, the v%d table is %zu", sym,
			      (unsigned long)es->st_size, g_ver, want);
		}
	}
	const char *name = *(const char *const *)g_table;
	CHECK(name, "%s.name is NULL", sym);
	CHECK(!strcmp(name, "rdmesh"), "%s.name is \"%s\", expected \"rdmesh\" (NCCL_NET=rdmesh)",
	      sym, name);
	char opt[256] = "";
	for (int i = 0; i < table_fns(g_ver); i++) {
		void *f = table_fn(i);
		if (!f) {
			CHECK(!fn_required(fn_names[i], g_ver), "%s.%s is NULL (NCCL calls it)", sym,
			      fn_names[i]);
			strncat(opt, " ", sizeof opt - strlen(opt) - 1);
			strncat(opt, fn_names[i], sizeof opt - strlen(opt) - 1);
		}
	}
	if (!quiet)
		say("loaded %s from %s: name \"%s\", %d functions, NULL:%s", sym, g_path, name,
		    table_fns(g_ver), opt[0] ? opt : " none");
}

static void net_close_lib(void)
{
	CHECK(dlclose(g_lib) == 0, "dlclose: %s", dlerror());
	g_lib = NULL;
	g_table = NULL;
}

static void *net_init(uint64_t comm_id)
{
	void *ctx = NULL;
	hx_comm_config cfg = {HX_TRAFFIC_CLASS_UNDEF};
	switch (g_ver) {
	case 8: NCALL(T8->init(hx_log)); break;
	case 9: NCALL(T9->init(hx_log)); break;
	case 10: NCALL(T10->init(hx_log, hx_prof)); break;
	case 11: NCALL(T11->init(&ctx, comm_id, &cfg, hx_log, hx_prof)); break;
	default: NCALL(T12->init(&ctx, comm_id, &cfg, hx_log, hx_prof)); break;
	}
	return ctx;
}

static void net_finalize(void *ctx)
{
	if (g_ver == 11)
		NCALL(T11->finalize(ctx));
	else if (g_ver == 12)
		NCALL(T12->finalize(ctx));
}

static hx_result net_devices(int *n)
{
	return T8->devices(n); /* same slot and signature in every version */
}

/* Wrappers with one signature; each checks that the call did not block. */
static __thread double call_t0;
static void call_begin(void)
{
	call_t0 = now_s();
}
static void call_end(const char *what)
{
	double ms = (now_s() - call_t0) * 1e3;
	if (ms > g_max_call_ms)
		g_max_call_ms = ms;
	CHECK(ms <= g_block_ms,
	      "%s took %.0f ms in one call: it must not block (NCCL calls it from its proxy thread "
	      "and polls again; limit HX_BLOCK_MS=%.0f)",
	      what, ms, g_block_ms);
}

static void net_listen(void *ctx, int dev, unsigned char *handle, void **lc)
{
	*lc = NULL;
	call_begin();
	switch (g_ver) {
	case 8: NCALL(T8->listen(dev, handle, lc)); break;
	case 9: NCALL(T9->listen(dev, handle, lc)); break;
	case 10: NCALL(T10->listen(dev, handle, lc)); break;
	case 11: NCALL(T11->listen(ctx, dev, handle, lc)); break;
	default: NCALL(T12->listen(ctx, dev, handle, lc)); break;
	}
	call_end("listen");
	CHECK(*lc, "listen(dev %d) returned success with a NULL listen comm", dev);
}

static void net_connect(void *ctx, int dev, unsigned char *handle, void **sc)
{
	hx_dev_handle *dh = NULL;
	hx_comm_config cfg = {HX_TRAFFIC_CLASS_UNDEF};
	call_begin();
	switch (g_ver) {
	case 8: NCALL(T8->connect(dev, handle, sc, &dh)); break;
	case 9: NCALL(T9->connect(dev, handle, sc, &dh)); break;
	case 10: NCALL(T10->connect(dev, &cfg, handle, sc, &dh)); break;
	case 11: NCALL(T11->connect(ctx, dev, handle, sc, &dh)); break;
	default: NCALL(T12->connect(ctx, dev, handle, sc, &dh)); break;
	}
	call_end("connect");
	CHECK(dh == NULL, "connect wrote a device handle %p for a host-only (HOST) connection",
	      (void *)dh);
}

static void net_accept(void *lc, void **rc)
{
	hx_dev_handle *dh = NULL;
	call_begin();
	NCALL(T8->accept(lc, rc, &dh)); /* same slot and signature in every version */
	call_end("accept");
	CHECK(dh == NULL, "accept wrote a device handle %p for a host-only (HOST) connection",
	      (void *)dh);
}

static void *net_regmr(void *comm, void *data, size_t size)
{
	void *mh = NULL;
	NCALL(T8->regMr(comm, data, size, HX_PTR_HOST, &mh));
	return mh;
}

static void net_deregmr(void *comm, void *mh)
{
	NCALL(T8->deregMr(comm, mh));
}

static hx_result net_isend(void *sc, void *data, size_t size, int tag, void *mh, void **req)
{
	switch (g_ver) {
	case 8:
		CHECK(size <= INT_MAX, "v8 isend takes an int size; %zu is too large", size);
		return T8->isend(sc, data, (int)size, tag, mh, req);
	case 9: return T9->isend(sc, data, size, tag, mh, req);
	case 10: return T10->isend(sc, data, size, tag, mh, NULL, req);
	case 11: return T11->isend(sc, data, size, tag, mh, NULL, req);
	default: return T12->isend(sc, data, size, tag, mh, NULL, req);
	}
}

static hx_result net_irecv(void *rc, int n, void **data, size_t *sizes, int *tags, void **mhs,
			   void **req)
{
	void *ph[MAX_GROUP] = {0};
	int isz[MAX_GROUP];
	switch (g_ver) {
	case 8:
		for (int i = 0; i < n; i++) {
			CHECK(sizes[i] <= INT_MAX, "v8 irecv takes int sizes; %zu is too large",
			      sizes[i]);
			isz[i] = (int)sizes[i];
		}
		return T8->irecv(rc, n, data, isz, tags, mhs, req);
	case 9: return T9->irecv(rc, n, data, sizes, tags, mhs, req);
	case 10: return T10->irecv(rc, n, data, sizes, tags, mhs, ph, req);
	case 11: return T11->irecv(rc, n, data, sizes, tags, mhs, ph, req);
	default: return T12->irecv(rc, n, data, sizes, tags, mhs, ph, req);
	}
}

/* ---------- device properties ---------- */

typedef struct {
	char name[128];
	char pci[256];
	uint64_t guid;
	int ptr, reg_global, force_flush, speed, port, max_comms, max_recvs, dev_type, dev_ver;
	float latency;
	int vndevs, vdev0;
	size_t max_p2p, max_coll;
	int max_multi;
	int rail, plane;
} props_t;

#define PFILL 0xEE
static int unwritten(const void *p, size_t len)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < len; i++)
		if (b[i] != PFILL)
			return 0;
	return 1;
}

/* Calls getProperties with the version's struct inside a 0xEE-filled buffer, checks that the
 * plugin wrote every field and nothing past the struct, and normalizes the result. */
static void get_props(int dev, props_t *o)
{
	unsigned char buf[sizeof(hx_props_v12) + 64];
	size_t sz;
	memset(buf, PFILL, sizeof buf);
	memset(o, 0, sizeof *o);
	o->vndevs = 1;
	o->vdev0 = dev;
	o->max_multi = 1;
	o->rail = o->plane = -1;
#define FIELD(S, f)                                                                                \
	do {                                                                                       \
		CHECK(!unwritten(&((S *)buf)->f, sizeof(((S *)buf)->f)),                           \
		      "getProperties(dev %d) v%d left field %s unwritten", dev, g_ver, #f);        \
	} while (0)
#define COMMON(S)                                                                                  \
	do {                                                                                       \
		S *p = (S *)buf;                                                                   \
		FIELD(S, name);                                                                    \
		FIELD(S, pciPath);                                                                 \
		FIELD(S, guid);                                                                    \
		FIELD(S, ptrSupport);                                                              \
		FIELD(S, regIsGlobal);                                                             \
		FIELD(S, speed);                                                                   \
		FIELD(S, port);                                                                    \
		FIELD(S, latency);                                                                 \
		FIELD(S, maxComms);                                                                \
		FIELD(S, maxRecvs);                                                                \
		FIELD(S, netDeviceType);                                                           \
		FIELD(S, netDeviceVersion);                                                        \
		CHECK(p->name, "getProperties(dev %d): name is NULL", dev);                       \
		CHECK(strnlen(p->name, 256) < 256, "getProperties(dev %d): name not terminated",  \
		      dev);                                                                        \
		snprintf(o->name, sizeof o->name, "%s", p->name);                                 \
		snprintf(o->pci, sizeof o->pci, "%s", p->pciPath ? p->pciPath : "(null)");        \
		o->guid = p->guid;                                                                 \
		o->ptr = p->ptrSupport;                                                            \
		o->reg_global = p->regIsGlobal;                                                    \
		o->speed = p->speed;                                                               \
		o->port = p->port;                                                                 \
		o->latency = p->latency;                                                           \
		o->max_comms = p->maxComms;                                                        \
		o->max_recvs = p->maxRecvs;                                                        \
		o->dev_type = p->netDeviceType;                                                    \
		o->dev_ver = p->netDeviceVersion;                                                  \
	} while (0)
#define LATER(S)                                                                                   \
	do {                                                                                       \
		S *p = (S *)buf;                                                                   \
		FIELD(S, forceFlush);                                                              \
		FIELD(S, vProps.ndevs);                                                            \
		FIELD(S, maxP2pBytes);                                                             \
		FIELD(S, maxCollBytes);                                                            \
		o->force_flush = p->forceFlush;                                                    \
		o->vndevs = p->vProps.ndevs;                                                       \
		o->vdev0 = p->vProps.ndevs > 0 ? p->vProps.devs[0] : -1;                           \
		o->max_p2p = p->maxP2pBytes;                                                       \
		o->max_coll = p->maxCollBytes;                                                     \
	} while (0)
	switch (g_ver) {
	case 8:
		sz = sizeof(hx_props_v8);
		NCALL(T8->getProperties(dev, (hx_props_v8 *)buf));
		COMMON(hx_props_v8);
		break;
	case 9:
	case 10:
		sz = sizeof(hx_props_v9);
		if (g_ver == 9)
			NCALL(T9->getProperties(dev, (hx_props_v9 *)buf));
		else
			NCALL(T10->getProperties(dev, (hx_props_v9 *)buf));
		COMMON(hx_props_v9);
		LATER(hx_props_v9);
		break;
	case 11:
		sz = sizeof(hx_props_v11);
		NCALL(T11->getProperties(dev, (hx_props_v11 *)buf));
		COMMON(hx_props_v11);
		LATER(hx_props_v11);
		FIELD(hx_props_v11, maxMultiRequestSize);
		o->max_multi = ((hx_props_v11 *)buf)->maxMultiRequestSize;
		break;
	default:
		sz = sizeof(hx_props_v12);
		NCALL(T12->getProperties(dev, (hx_props_v12 *)buf));
		COMMON(hx_props_v12);
		LATER(hx_props_v12);
		FIELD(hx_props_v12, maxMultiRequestSize);
		FIELD(hx_props_v12, railId);
		FIELD(hx_props_v12, planeId);
		o->max_multi = ((hx_props_v12 *)buf)->maxMultiRequestSize;
		o->rail = ((hx_props_v12 *)buf)->railId;
		o->plane = ((hx_props_v12 *)buf)->planeId;
		break;
	}
	for (size_t i = sz; i < sizeof buf; i++)
		CHECK(buf[i] == PFILL,
		      "getProperties(dev %d) v%d wrote byte %zu, past the end of the %zu-byte v%d "
		      "properties struct (a newer version's layout?)",
		      dev, g_ver, i, sz, g_ver);
#undef FIELD
#undef COMMON
#undef LATER
}

static void check_props(int dev, const props_t *p, int print)
{
	if (print)
		say("dev %d: name=%s pciPath=%s guid=0x%016llx ptrSupport=0x%x regIsGlobal=%d "
		    "forceFlush=%d speed=%d Mb/s port=%d latency=%.2f us maxComms=%d maxRecvs=%d "
		    "netDeviceType=%d netDeviceVersion=%d vProps={%d,[%d..]} maxP2pBytes=%zu "
		    "maxCollBytes=%zu maxMultiRequestSize=%d railId=%d planeId=%d",
		    dev, p->name, p->pci, (unsigned long long)p->guid, p->ptr, p->reg_global,
		    p->force_flush, p->speed, p->port, p->latency, p->max_comms, p->max_recvs,
		    p->dev_type, p->dev_ver, p->vndevs, p->vdev0, p->max_p2p, p->max_coll,
		    p->max_multi, p->rail, p->plane);
	CHECK(p->name[0], "dev %d: empty name", dev);
	CHECK(p->ptr & HX_PTR_HOST, "dev %d: ptrSupport 0x%x lacks NCCL_PTR_HOST", dev, p->ptr);
	CHECK(p->speed > 0, "dev %d: speed %d Mb/s must be > 0", dev, p->speed);
	CHECK(p->max_recvs >= 1 && p->max_recvs <= 64, "dev %d: maxRecvs %d not in [1, 64]", dev,
	      p->max_recvs);
	CHECK(p->max_comms >= 1, "dev %d: maxComms %d must be >= 1", dev, p->max_comms);
	CHECK(p->dev_type == HX_NET_DEVICE_HOST,
	      "dev %d: netDeviceType %d, NCCL requires HOST (0) for a host-only plugin", dev,
	      p->dev_type);
	CHECK(isfinite(p->latency) && p->latency >= 0, "dev %d: latency %f us", dev, p->latency);
	CHECK(p->reg_global == 0 || p->reg_global == 1, "dev %d: regIsGlobal %d", dev,
	      p->reg_global);
	CHECK(p->force_flush == 0 || p->force_flush == 1, "dev %d: forceFlush %d", dev,
	      p->force_flush);
	if (g_ver >= 9) {
		CHECK(p->vndevs == 1 && p->vdev0 == dev,
		      "dev %d: vProps = {ndevs %d, devs[0] %d}, a physical device has {1, %d}", dev,
		      p->vndevs, p->vdev0, dev);
		CHECK(p->max_p2p > 0 && p->max_p2p <= HX_MAX_NET_SIZE_BYTES,
		      "dev %d: maxP2pBytes %zu not in (0, 1 TiB] (NCCL fails setup)", dev,
		      p->max_p2p);
		CHECK(p->max_coll > 0 && p->max_coll <= HX_MAX_NET_SIZE_BYTES,
		      "dev %d: maxCollBytes %zu not in (0, 1 TiB] (NCCL fails setup)", dev,
		      p->max_coll);
	}
	if (g_ver >= 11)
		CHECK(p->max_multi >= 1, "dev %d: maxMultiRequestSize %d must be >= 1", dev,
		      p->max_multi);
}

/* init + devices + getProperties of every device: what NCCL does when it picks a plugin. */
static void *net_setup(uint64_t comm_id, int print)
{
	void *ctx = net_init(comm_id);
	NCALL(net_devices(&g_ndev));
	CHECK(g_ndev > 0 && g_ndev <= MAX_DEVS, "devices() reported %d devices", g_ndev);
	for (int d = 0; d < g_ndev; d++) {
		props_t p;
		get_props(d, &p);
		check_props(d, &p, print);
		g_guid[d] = p.guid;
		for (int e = 0; e < d; e++)
			CHECK(g_guid[e] != p.guid,
			      "dev %d and dev %d share guid 0x%llx: NCCL would treat them as one port",
			      e, d, (unsigned long long)p.guid);
		if (d == 0)
			g_max_recvs = p.max_recvs;
	}
	if (print)
		say("init ok (ctx %p), %d device(s), maxRecvs %d", ctx, g_ndev, g_max_recvs);
	return ctx;
}

/* ---------- requests ---------- */

typedef struct {
	void *req;
	int is_recv, n, done, optional;
	size_t posted[MAX_GROUP];
	int sizes[TEST_SIZES];
	char what[96];
} hreq;

/* Requests posted and not yet seen done, oldest first (NCCL tests the oldest one while a post
 * returns NULL). */
#define MAX_PEND 4096
static __thread hreq *g_pend[MAX_PEND];
static __thread int g_npend;

static void pend_add(hreq *r)
{
	CHECK(g_npend < MAX_PEND, "harness: too many pending requests");
	g_pend[g_npend++] = r;
}

static void pend_remove(hreq *r)
{
	for (int i = 0; i < g_npend; i++)
		if (g_pend[i] == r) {
			memmove(&g_pend[i], &g_pend[i + 1], (size_t)(g_npend - i - 1) * sizeof r);
			g_npend--;
			return;
		}
}

/* One test() call; returns done. */
static int test_once(hreq *r)
{
	int done = 0;
	CHECK(!r->done, "harness: test on a finished request");
	for (int i = 0; i < TEST_SIZES; i++)
		r->sizes[i] = UNWRITTEN_SIZE;
	hx_result rc = T8->test(r->req, &done, r->sizes); /* same slot in every version */
	CHECK(rc == HX_SUCCESS, "test(%s) returned ncclResult %d", r->what, rc);
	CHECK(done == 0 || done == 1, "test(%s) set done=%d", r->what, done);
	if (done) {
		r->done = 1;
		pend_remove(r);
		int n = r->is_recv ? r->n : 1;
		for (int i = 0; i < n && !r->optional; i++)
			CHECK(r->sizes[i] != UNWRITTEN_SIZE, "test(%s) done without writing sizes[%d]",
			      r->what, i);
		for (int i = n; i < TEST_SIZES; i++)
			CHECK(r->sizes[i] == UNWRITTEN_SIZE,
			      "test(%s) wrote sizes[%d] = %d, past the %d entries of the request",
			      r->what, i, r->sizes[i], n);
	}
	return done;
}

static void poll_oldest(void)
{
	if (g_npend)
		test_once(g_pend[0]);
}

/* isend, retried while it returns a NULL request; *request must always be written. */
static void post_send(hreq *r, void *sc, void *data, size_t size, int tag, void *mh,
		      const char *what)
{
	double end = now_s() + g_timeout;
	memset(r, 0, sizeof *r);
	snprintf(r->what, sizeof r->what, "%s", what);
	r->n = 1;
	r->posted[0] = size;
	for (;;) {
		void *req = SENTINEL_REQ;
		hx_result rc = net_isend(sc, data, size, tag, mh, &req);
		CHECK(rc == HX_SUCCESS, "isend(%s, %zu bytes, tag %d) returned ncclResult %d", what,
		      size, tag, rc);
		CHECK(req != SENTINEL_REQ, "isend(%s) returned without writing *request", what);
		if (req) {
			r->req = req;
			pend_add(r);
			return;
		}
		g_null_sends++;
		CHECK(now_s() < end,
		      "isend(%s, %zu bytes) kept returning a NULL request for %.0f s (%d of this "
		      "process's requests pending)",
		      what, size, g_timeout, g_npend);
		poll_oldest();
		sched_yield();
	}
}

/* irecv of n buffers; *request preset to a stale value (or NCCL's 0x1 optional-completion
 * marker when optional is set) that the plugin must overwrite. With strict set, a NULL request
 * is retried without any test() call and fails after 2 s (a recv comm sustains 32 requests). */
static void post_recv(hreq *r, void *rc, int n, void **data, size_t *sizes, int *tags,
		      void **mhs, int optional, int strict, const char *what)
{
	double end = now_s() + (strict ? 2.0 : g_timeout);
	memset(r, 0, sizeof *r);
	snprintf(r->what, sizeof r->what, "%s", what);
	r->is_recv = 1;
	r->optional = optional;
	r->n = n;
	for (int i = 0; i < n; i++)
		r->posted[i] = sizes[i];
	for (;;) {
		void *preset = optional ? HX_OPTIONAL_RECV_COMPLETION : SENTINEL_REQ;
		void *req = g_ver == 8 ? NULL : preset; /* NCCL's v8 adapter clears it */
		hx_result res = net_irecv(rc, n, data, sizes, tags, mhs, &req);
		CHECK(res == HX_SUCCESS, "irecv(%s, n=%d) returned ncclResult %d", what, n, res);
		CHECK(g_ver == 8 || req != preset,
		      "irecv(%s) left *request at the value NCCL put there (%p); it must always "
		      "be overwritten (NULL when it cannot post)",
		      what, preset);
		if (req) {
			r->req = req;
			pend_add(r);
			return;
		}
		g_null_recvs++;
		CHECK(now_s() < end,
		      "irecv(%s, n=%d) kept returning a NULL request for %.0f s with %d requests of "
		      "this process pending%s",
		      what, n, strict ? 2.0 : g_timeout, g_npend,
		      strict ? " (every recv comm must sustain 32 requests without test calls)" : "");
		if (!strict)
			poll_oldest();
		sched_yield();
	}
}

/* Tests every request of the list round robin (as NCCL's progress thread does) until done. */
static void wait_all(hreq **rs, int n)
{
	double end = now_s() + g_timeout;
	long spins = 0;
	for (;;) {
		int left = 0;
		for (int i = 0; i < n; i++)
			if (!rs[i]->done && !test_once(rs[i]))
				left++;
		if (!left)
			return;
		if (now_s() > end) {
			for (int i = 0; i < n; i++)
				if (!rs[i]->done)
					die("timed out after %.0f s waiting for %s (%d of %d requests "
					    "not done)",
					    g_timeout, rs[i]->what, left, n);
		}
		if (++spins % 64 == 0)
			sched_yield();
	}
}

/* ---------- connections ---------- */

typedef struct {
	void *sc, *rc;
	unsigned char *sbuf, *rbuf;
	size_t cap;
	void *smh, *rmh;
	int to, from;
} link_t;

/* Polls connect (if handle) and accept (if lc) from this one thread until both are non-NULL. */
static void connect_accept(void *ctx, int dev, unsigned char *handle, void **sc, void *lc,
			   void **rc)
{
	double t0 = now_s(), end = t0 + g_timeout;
	long polls = 0;
	if (sc)
		*sc = NULL;
	if (rc)
		*rc = NULL;
	while ((sc && !*sc) || (rc && !*rc)) {
		if (sc && !*sc)
			net_connect(ctx, dev, handle, sc);
		if (rc && !*rc)
			net_accept(lc, rc);
		polls++;
		CHECK(now_s() < end, "connection not established after %.0f s (%ld polls): %s%s",
		      g_timeout, polls, sc && !*sc ? "connect still NULL " : "",
		      rc && !*rc ? "accept still NULL" : "");
		if (polls % 16 == 0)
			usleep(100);
	}
}

/* One connection to rank `to` and one from rank `from` on device dev (NCCL's setup for a ring
 * step): listen, hand the handle to `from` out of band, connect to `to` and accept from `from`
 * in one polling loop, close the listen comm, register cap-byte buffers on both comms. */
static void link_open(link_t *l, void *ctx, int dev, int to, int from, size_t cap)
{
	unsigned char mine[HX_HANDLE_MAXSIZE], peer[HX_HANDLE_MAXSIZE];
	void *lc;
	memset(l, 0, sizeof *l);
	memset(mine, 0, sizeof mine);
	l->to = to;
	l->from = from;
	net_listen(ctx, dev, mine, &lc);
	oob_send(from, mine, sizeof mine);
	oob_recv(to, peer, sizeof peer);
	double t0 = now_s();
	connect_accept(ctx, dev, peer, &l->sc, lc, &l->rc);
	NCALL(T8->closeListen(lc));
	l->cap = cap;
	l->sbuf = xalloc(cap);
	l->rbuf = xalloc(cap);
	l->smh = net_regmr(l->sc, l->sbuf, cap + GUARD);
	l->rmh = net_regmr(l->rc, l->rbuf, cap + GUARD);
	say("dev %d: connected to rank %d and accepted from rank %d in %.1f ms", dev, to, from,
	    (now_s() - t0) * 1e3);
}

static void link_close(link_t *l)
{
	net_deregmr(l->sc, l->smh);
	net_deregmr(l->rc, l->rmh);
	NCALL(T8->closeSend(l->sc));
	NCALL(T8->closeRecv(l->rc));
	free(l->sbuf);
	free(l->rbuf);
	memset(l, 0, sizeof *l);
}

/* One message each way over l: send `size` bytes seeded (rank, key) from sbuf+soff, receive
 * into rbuf+roff with `posted` bytes posted (>= what the peer sends, the same `size`), check
 * sizes reported, data, and that nothing past the message changed. */
static void exchange(link_t *l, size_t size, size_t posted, size_t soff, size_t roff, uint32_t key,
		     int optional)
{
	char what[96];
	hreq rr, sr;
	hreq *both[2] = {&rr, &sr};
	unsigned char *dst = l->rbuf + roff;
	void *dp = dst;
	int tag = l->from;
	CHECK(roff + posted + GUARD <= l->cap + GUARD && soff + size <= l->cap,
	      "harness: %zu bytes do not fit", posted);
	memset(dst, 0xA5, posted + GUARD);
	fill(l->sbuf + soff, size, mkseed((uint32_t)g_rank, key, (uint32_t)size));
	snprintf(what, sizeof what, "recv %zu bytes (posted %zu) from rank %d", size, posted,
		 l->from);
	post_recv(&rr, l->rc, 1, &dp, &posted, &tag, &l->rmh, optional, 0, what);
	snprintf(what, sizeof what, "send %zu bytes to rank %d", size, l->to);
	post_send(&sr, l->sc, l->sbuf + soff, size, g_rank, l->smh, what);
	wait_all(both, 2);
	CHECK(sr.sizes[0] == (int)size, "test(send %zu bytes) reported size %d", size, sr.sizes[0]);
	uint32_t seed = mkseed((uint32_t)l->from, key, (uint32_t)size);
	if (optional) {
		/* an optional completion may finish before the data landed: wait for the data */
		double end = now_s() + g_timeout;
		while (first_bad(dst, size, seed) != SIZE_MAX && now_s() < end)
			usleep(1000);
	} else {
		CHECK(rr.sizes[0] == (int)size,
		      "test(recv posted %zu) reported %d bytes, the peer sent %zu", posted,
		      rr.sizes[0], size);
	}
	snprintf(what, sizeof what, "%zu bytes from rank %d", size, l->from);
	check_pattern(dst, size, seed, what);
	check_const(dst + size, posted - size + GUARD, 0xA5,
		    "bytes past the received message and the posted buffer");
}

/* ---------- scenarios ---------- */

static void sc_props(void)
{
	void *ctx = net_setup(0x100, 1);
	say("%d device(s), guids distinct, properties valid", g_ndev);
	net_finalize(ctx);
}

static void sc_selfloop(void)
{
	void *ctx = net_setup(0x200, 0);
	unsigned char handle[HX_HANDLE_MAXSIZE] = {0};
	void *lc, *sc, *rc;
	net_listen(ctx, 0, handle, &lc);
	connect_accept(ctx, 0, handle, &sc, lc, &rc);
	NCALL(T8->closeListen(lc));
	size_t cap = 1 << 20;
	unsigned char *s = xalloc(cap), *d = xalloc(cap);
	void *smh = net_regmr(sc, s, cap), *rmh = net_regmr(rc, d, cap + GUARD);
	static const size_t sizes[] = {0, 1, 7, 4096, 65539, 1 << 20};
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		size_t n = sizes[i], posted = cap;
		hreq rr, sr;
		hreq *both[2] = {&rr, &sr};
		void *dp = d;
		int tag = 0;
		memset(d, 0xA5, cap + GUARD);
		fill(s, n, mkseed(9, (uint32_t)i, (uint32_t)n));
		post_recv(&rr, rc, 1, &dp, &posted, &tag, &rmh, 0, 0, "self recv");
		post_send(&sr, sc, s, n, 0, smh, "self send");
		wait_all(both, 2);
		CHECK(rr.sizes[0] == (int)n && sr.sizes[0] == (int)n,
		      "self transfer of %zu bytes: test reported recv %d, send %d", n, rr.sizes[0],
		      sr.sizes[0]);
		check_pattern(d, n, mkseed(9, (uint32_t)i, (uint32_t)n), "self transfer");
		check_const(d + n, cap - n + GUARD, 0xA5, "bytes past a self transfer");
	}
	net_deregmr(sc, smh);
	net_deregmr(rc, rmh);
	NCALL(T8->closeSend(sc));
	NCALL(T8->closeRecv(rc));
	say("connect + accept to itself from one thread, 6 sizes 0..1 MiB checked");
	net_finalize(ctx);
}

static void sc_sizes(void)
{
	size_t max = (size_t)env_num("HX_MAX_SIZE", 8 << 20);
	void *ctx = net_setup(0x300, 0);
	long net_lines0 = g_log_net_lines;
	link_t l;
	int peer = 1 - g_rank;
	link_open(&l, ctx, 0, peer, peer, max + 4096);
	CHECK(g_log_net_lines > net_lines0,
	      "no line logged with the NET subsystem flag while connecting (expected one line per "
	      "connection through NCCL's logger)");
	static const size_t sizes[] = {0,	  1,	    7,	       8,	 127,	  128,
				       129,	  4095,	    4096,      4097,	 65536,	  65539,
				       262144,	  1 << 20,  (1 << 20) + 1, 3 << 20, 8 << 20, 16 << 20,
				       64 << 20,  256 << 20};
	int count = 0;
	double t0 = now_s();
	size_t bytes = 0;
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		if (sizes[i] > max)
			continue;
		/* odd source and destination offsets on every other size */
		size_t off = (i & 1) ? 3 : 0;
		exchange(&l, sizes[i], sizes[i], off, off, (uint32_t)i, 0);
		bytes += sizes[i];
		count++;
	}
	say("%d sizes 0..%zu bytes each way, all bytes checked (%.1f MB/s each way)", count, max,
	    bytes / 1e6 / (now_s() - t0));
	if (g_ver >= 9) {
		exchange(&l, 4096, 4096, 0, 0, 1000, 1);
		say("irecv with *request preset to NCCL_NET_OPTIONAL_RECV_COMPLETION: overwritten, "
		    "data checked");
	}
	/* the same message size many times, reusing the registered buffers */
	for (int k = 0; k < 50; k++)
		exchange(&l, 4096 + (size_t)k, 8192, (size_t)k, 0, 2000 + (uint32_t)k, 0);
	say("50 more exchanges of 4096..4145 bytes into an 8192-byte receive");
	link_close(&l);
	for (int d = 1; d < g_ndev; d++) {
		link_t e;
		link_open(&e, ctx, d, peer, peer, 1 << 20);
		exchange(&e, 65539, 65539, 0, 0, 77, 0);
		exchange(&e, 1 << 20, 1 << 20, 0, 0, 78, 0);
		link_close(&e);
		say("dev %d: 64 KiB + 3 and 1 MiB each way checked", d);
	}
	barrier();
	net_finalize(ctx);
}

static void sc_smaller(void)
{
	void *ctx = net_setup(0x400, 0);
	link_t l;
	int peer = 1 - g_rank;
	size_t posted = (1 << 20) + 64;
	link_open(&l, ctx, 0, peer, peer, posted);
	static const size_t sizes[] = {0, 1, 100, 4095, 65536, (1 << 20) - 1, (1 << 20) + 63};
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
		exchange(&l, sizes[i], posted, 0, 0, 300 + (uint32_t)i, 0);
	say("sends of 0..1 MiB+63 bytes into %zu-byte receives: actual sizes reported, nothing "
	    "past the message written",
	    posted);
	link_close(&l);
	barrier();
	net_finalize(ctx);
}

static size_t grp_size(int round, int g, int k)
{
	if (round == 2 && k % 3 == 1)
		return 0; /* empty parts of a grouped receive (PXN sends 0 bytes too) */
	return 1000u * (size_t)(k + 1) + 17u * (size_t)g + (size_t)round * 4099u + (size_t)k;
}

static void sc_grouped(void)
{
	void *ctx = net_setup(0x500, 0);
	link_t l;
	int peer = 1 - g_rank;
	enum { G = 4, SLOT = 65536 };
	int n = g_max_recvs < MAX_GROUP ? g_max_recvs : MAX_GROUP;
	if (n == 1)
		say("maxRecvs = 1: grouped receives not offered; running n = 1");
	link_open(&l, ctx, 0, peer, peer, (size_t)G * MAX_GROUP * SLOT);
	static const int ns_round[] = {0, 1, 0, 2};
	for (int round = 0; round < 4; round++) {
		/* round 0 and 2: n buffers per group; 1: n = 1; 3: n = 2 (if offered) */
		int gn = ns_round[round] == 0 ? n : ns_round[round] < n ? ns_round[round] : n;
		hreq rr[G], sr[G * MAX_GROUP];
		hreq *all[G + G * MAX_GROUP];
		int na = 0;
		memset(l.rbuf, 0xA5, l.cap + GUARD);
		for (int g = 0; g < G; g++) {
			void *data[MAX_GROUP], *mhs[MAX_GROUP];
			size_t sizes[MAX_GROUP];
			int tags[MAX_GROUP];
			char what[96];
			for (int k = 0; k < gn; k++) {
				data[k] = l.rbuf + ((size_t)g * MAX_GROUP + (size_t)k) * SLOT;
				mhs[k] = l.rmh;
				sizes[k] = SLOT;
				tags[k] = 100 + 7 * k;
			}
			snprintf(what, sizeof what, "grouped recv round %d group %d (n=%d)", round, g,
				 gn);
			post_recv(&rr[g], l.rc, gn, data, sizes, tags, mhs, 0, 1, what);
			all[na++] = &rr[g];
		}
		barrier(); /* every group posted on both sides */
		for (int g = 0; g < G; g++) {
			/* within a group, send the tags in a rotated, reversed order */
			for (int j = 0; j < gn; j++) {
				int k = (gn - 1 - j + g) % gn;
				size_t sz = grp_size(round, g, k);
				unsigned char *src = l.sbuf + ((size_t)g * MAX_GROUP + (size_t)k) * SLOT;
				char what[96];
				fill(src, sz, mkseed((uint32_t)g_rank, (uint32_t)(round * 100 + g),
						     (uint32_t)(100 + 7 * k)));
				snprintf(what, sizeof what, "send round %d group %d tag %d", round, g,
					 100 + 7 * k);
				hreq *s = &sr[g * MAX_GROUP + k];
				post_send(s, l.sc, src, sz, 100 + 7 * k, l.smh, what);
				all[na++] = s;
			}
		}
		wait_all(all, na);
		for (int g = 0; g < G; g++)
			for (int k = 0; k < gn; k++) {
				size_t sz = grp_size(round, g, k);
				unsigned char *dst =
				    l.rbuf + ((size_t)g * MAX_GROUP + (size_t)k) * SLOT;
				char what[128];
				CHECK(rr[g].sizes[k] == (int)sz,
				      "round %d group %d buffer %d (tag %d): test reported %d bytes, "
				      "the send with that tag had %zu",
				      round, g, k, 100 + 7 * k, rr[g].sizes[k], sz);
				CHECK(sr[g * MAX_GROUP + k].sizes[0] == (int)sz,
				      "send round %d group %d tag %d: test reported %d bytes, sent %zu",
				      round, g, 100 + 7 * k, sr[g * MAX_GROUP + k].sizes[0], sz);
				snprintf(what, sizeof what,
					 "round %d group %d buffer %d (tag %d; a mismatch means the "
					 "tag or FIFO matching is wrong)",
					 round, g, k, 100 + 7 * k);
				check_pattern(dst, sz,
					      mkseed((uint32_t)peer, (uint32_t)(round * 100 + g),
						     (uint32_t)(100 + 7 * k)),
					      what);
				check_const(dst + sz, SLOT - sz, 0xA5, "bytes past a grouped message");
			}
		say("round %d: %d grouped receives of n=%d in flight, sends in rotated tag order%s: "
		    "sizes and bytes checked",
		    round, G, gn, round == 2 ? " (every third part empty)" : "");
	}
	link_close(&l);
	barrier();
	net_finalize(ctx);
}

static size_t infl_size(int round, int k)
{
	return 4096u * (size_t)((k % 8) + 1) + (size_t)k * 13u + (size_t)round;
}

/* M messages each way over l (0..20000 bytes, sizes and seeds from the message index and key)
 * with a sliding window of 32 requests per direction, every message checked in FIFO order;
 * l->cap must hold 32 slots of 40960 bytes. */
static void stream(link_t *l, int M, uint32_t key)
{
	enum { N = HX_MAX_REQUESTS, SLOT = 40960 };
	hreq rr[N], sr[N];
	int next_r = 0, next_s = 0, done_r = 0, done_s = 0, tag = l->from;
	double t0 = now_s(), end = now_s() + g_timeout * 4;
	CHECK(l->cap >= (size_t)N * SLOT, "harness: stream needs %d bytes", N * SLOT);
	memset(rr, 0, sizeof rr);
	memset(sr, 0, sizeof sr);
	memset(l->rbuf, 0xA5, l->cap + GUARD);
	while (done_r < M || done_s < M) {
		CHECK(now_s() < end, "stream stalled: %d/%d receives and %d/%d sends done", done_r,
		      M, done_s, M);
		while (next_r < M && next_r - done_r < N) {
			int slot = next_r % N;
			void *dp = l->rbuf + (size_t)slot * SLOT;
			size_t posted = SLOT;
			post_recv(&rr[slot], l->rc, 1, &dp, &posted, &tag, &l->rmh, 0, 0,
				  "stream recv");
			next_r++;
		}
		if (next_s < M && next_s - done_s < N) {
			int slot = next_s % N;
			size_t sz = (size_t)(mix64((uint64_t)next_s ^ key) % 20000);
			fill(l->sbuf + (size_t)slot * SLOT, sz,
			     mkseed((uint32_t)g_rank, key, (uint32_t)next_s));
			post_send(&sr[slot], l->sc, l->sbuf + (size_t)slot * SLOT, sz, g_rank, l->smh,
				  "stream send");
			next_s++;
		}
		if (done_s < next_s && (sr[done_s % N].done || test_once(&sr[done_s % N])))
			done_s++;
		if (done_r < next_r && (rr[done_r % N].done || test_once(&rr[done_r % N]))) {
			int slot = done_r % N;
			size_t sz = (size_t)(mix64((uint64_t)done_r ^ key) % 20000);
			char what[64];
			CHECK(rr[slot].sizes[0] == (int)sz,
			      "stream message %d: %d bytes reported, %zu sent", done_r,
			      rr[slot].sizes[0], sz);
			snprintf(what, sizeof what, "stream message %d", done_r);
			check_pattern(l->rbuf + (size_t)slot * SLOT, sz,
				      mkseed((uint32_t)l->from, key, (uint32_t)done_r), what);
			done_r++;
		}
	}
	say("stream of %d messages (0..20000 bytes) with a window of 32 requests each way: all "
	    "checked, %.0f msg/s",
	    M, M / (now_s() - t0));
}

static void sc_inflight(void)
{
	void *ctx = net_setup(0x600, 0);
	link_t l;
	int peer = 1 - g_rank;
	enum { N = HX_MAX_REQUESTS, SLOT = 40960 };
	link_open(&l, ctx, 0, peer, peer, (size_t)N * SLOT);
	for (int round = 0; round < 3; round++) {
		hreq rr[N], sr[N];
		hreq *all[2 * N];
		int na = 0, tag = peer;
		memset(l.rbuf, 0xA5, l.cap + GUARD);
		for (int k = 0; k < N; k++) {
			void *dp = l.rbuf + (size_t)k * SLOT;
			size_t posted = SLOT;
			char what[64];
			snprintf(what, sizeof what, "recv %d of %d in flight", k + 1, N);
			post_recv(&rr[k], l.rc, 1, &dp, &posted, &tag, &l.rmh, 0, 1, what);
			all[na++] = &rr[k];
		}
		barrier(); /* 32 receives posted on both sides, none tested */
		for (int k = 0; k < N; k++) {
			size_t sz = infl_size(round, k);
			char what[64];
			fill(l.sbuf + (size_t)k * SLOT, sz,
			     mkseed((uint32_t)g_rank, (uint32_t)round, (uint32_t)k));
			snprintf(what, sizeof what, "send %d of %d in flight", k + 1, N);
			post_send(&sr[k], l.sc, l.sbuf + (size_t)k * SLOT, sz, g_rank, l.smh, what);
			all[na++] = &sr[k];
		}
		wait_all(all, na);
		for (int k = 0; k < N; k++) {
			size_t sz = infl_size(round, k);
			char what[96];
			CHECK(rr[k].sizes[0] == (int)sz,
			      "round %d: receive %d reported %d bytes, send %d had %zu (FIFO order?)",
			      round, k, rr[k].sizes[0], k, sz);
			snprintf(what, sizeof what, "round %d receive %d (FIFO order)", round, k);
			check_pattern(l.rbuf + (size_t)k * SLOT, sz,
				      mkseed((uint32_t)peer, (uint32_t)round, (uint32_t)k), what);
			check_const(l.rbuf + (size_t)k * SLOT + sz, SLOT - sz, 0xA5,
				    "bytes past an in-flight message");
		}
		say("round %d: 32 receives and 32 sends in flight per direction, all checked", round);
	}
	stream(&l, 2000, 77);
	link_close(&l);
	barrier();
	net_finalize(ctx);
}

/* NCCL's threads: connections are set up, registered and closed on the proxy "service" thread
 * while the "progress" thread keeps traffic going on earlier connections. */
static void *churn(void *arg)
{
	int peer = 1 - g_rank;
	for (int i = 0; i < 8; i++) {
		link_t l;
		link_open(&l, arg, 0, peer, peer, 1 << 20);
		exchange(&l, 65536 + (size_t)i, 65536 + (size_t)i, 0, 0, 500 + (uint32_t)i, 0);
		link_close(&l);
	}
	return NULL;
}

static void sc_threads(void)
{
	void *ctx = net_setup(0xc00, 0);
	int peer = 1 - g_rank;
	link_t l;
	pthread_t t;
	link_open(&l, ctx, 0, peer, peer, (size_t)HX_MAX_REQUESTS * 40960);
	barrier();
	CHECK(pthread_create(&t, NULL, churn, ctx) == 0, "pthread_create failed");
	stream(&l, 3000, 88);
	CHECK(pthread_join(t, NULL) == 0, "pthread_join failed");
	link_close(&l);
	say("a 3000-message stream on one thread while another opened, used and closed 8 "
	    "connections");
	barrier();
	net_finalize(ctx);
}

static void sc_close_inflight(void)
{
	void *ctx = net_setup(0x700, 0);
	int peer = 1 - g_rank;
	enum { BIG = 4 << 20 };
	/* 1: 8 receives posted, 4 large sends posted by each side, then deregMr + close at once */
	{
		link_t l;
		hreq rr[8], sr[4];
		int tag = peer;
		link_open(&l, ctx, 0, peer, peer, (size_t)8 * BIG);
		for (int k = 0; k < 8; k++) {
			void *dp = l.rbuf + (size_t)k * BIG;
			size_t posted = BIG;
			post_recv(&rr[k], l.rc, 1, &dp, &posted, &tag, &l.rmh, 0, 1, "recv to close");
		}
		barrier();
		for (int k = 0; k < 4; k++)
			post_send(&sr[k], l.sc, l.sbuf + (size_t)k * BIG, BIG, g_rank, l.smh,
				  "send to close");
		barrier(); /* both sides posted everything: no call races the peer's close */
		double t0 = now_s();
		net_deregmr(l.sc, l.smh);
		net_deregmr(l.rc, l.rmh);
		NCALL(T8->closeSend(l.sc));
		NCALL(T8->closeRecv(l.rc));
		g_npend = 0; /* NCCL never touches those requests again */
		say("closed a send comm with 4 x 4 MiB sends and a recv comm with 8 receives in "
		    "flight (%.1f ms)",
		    (now_s() - t0) * 1e3);
		/* nothing may write into the buffers once close returned */
		memset(l.rbuf, 0x5A, l.cap + GUARD);
		usleep(300000);
		check_const(l.rbuf, l.cap + GUARD, 0x5A,
			    "receive buffers 300 ms after closeRecv returned (written after close)");
		free(l.sbuf);
		free(l.rbuf);
	}
	barrier();
	/* 2: rank 0 sends with no receive posted by rank 1, then both close */
	{
		link_t l;
		link_open(&l, ctx, 0, peer, peer, 1 << 20);
		int posted = 0;
		if (g_rank == 0) {
			double end = now_s() + 0.2;
			while (posted < 3 && now_s() < end) {
				void *req = SENTINEL_REQ;
				NCALL(net_isend(l.sc, l.sbuf, 1 << 20, g_rank, l.smh, &req));
				CHECK(req != SENTINEL_REQ, "isend returned without writing *request");
				if (req)
					posted++;
				else
					usleep(1000);
			}
		}
		barrier();
		net_deregmr(l.sc, l.smh);
		net_deregmr(l.rc, l.rmh);
		NCALL(T8->closeSend(l.sc));
		NCALL(T8->closeRecv(l.rc));
		free(l.sbuf);
		free(l.rbuf);
		if (g_rank == 0)
			say("closed after %d unmatched 1 MiB sends (no receive posted by the peer)",
			    posted);
	}
	barrier();
	/* 3: the plugin still works: a new connection carries checked data */
	{
		link_t l;
		link_open(&l, ctx, 0, peer, peer, 4 << 20);
		exchange(&l, (1 << 20) + 3, (1 << 20) + 3, 0, 0, 9, 0);
		exchange(&l, 4 << 20, 4 << 20, 0, 0, 10, 0);
		link_close(&l);
		say("a new connection after the closes: 1 MiB+3 and 4 MiB each way checked");
	}
	barrier();
	net_finalize(ctx);
}

/* A send larger than the posted receive (NCCL never does this; a plugin refuses it or, like
 * NCCL's IB transport, truncates): nothing may be written past the posted buffer, and the
 * requests must end (done or an error), never hang. */
static void sc_oversize(void)
{
	void *ctx = net_setup(0xd00, 0);
	int peer = 1 - g_rank;
	enum { POSTED = 1000, SENT = 2000 };
	link_t l;
	link_open(&l, ctx, 0, peer, peer, 1 << 16);
	const char *outcome = "";
	if (g_rank == 1) {
		void *dp = l.rbuf, *req = SENTINEL_REQ;
		size_t posted = POSTED;
		int tag = peer, done = 0, sizes[TEST_SIZES];
		hx_result rc;
		memset(l.rbuf, 0xA5, l.cap + GUARD);
		double end = now_s() + g_timeout;
		do {
			req = SENTINEL_REQ;
			rc = net_irecv(l.rc, 1, &dp, &posted, &tag, &l.rmh, &req);
		} while (rc == HX_SUCCESS && !req && now_s() < end);
		barrier();
		if (rc != HX_SUCCESS) {
			outcome = "irecv refused";
		} else {
			CHECK(req && req != SENTINEL_REQ, "irecv posted no request");
			do {
				sizes[0] = UNWRITTEN_SIZE;
				rc = T8->test(req, &done, sizes);
			} while (rc == HX_SUCCESS && !done && now_s() < end);
			CHECK(rc != HX_SUCCESS || done,
			      "a %d-byte send into a %d-byte receive neither completed nor failed in "
			      "%.0f s",
			      SENT, POSTED, g_timeout);
			if (rc != HX_SUCCESS) {
				outcome = "test() of the receive returned an error";
			} else {
				CHECK(sizes[0] >= 0 && sizes[0] <= POSTED,
				      "a %d-byte send into a %d-byte receive reported %d bytes", SENT,
				      POSTED, sizes[0]);
				outcome = "the receive completed truncated";
			}
		}
		usleep(200000);
		check_const(l.rbuf + POSTED, l.cap - POSTED + GUARD, 0xA5,
			    "bytes past a 1000-byte receive that a 2000-byte send targeted");
	} else {
		void *req = NULL;
		int done = 0, sz = UNWRITTEN_SIZE;
		hx_result rc;
		double end = now_s() + g_timeout;
		fill(l.sbuf, SENT, 1);
		barrier();
		do {
			req = SENTINEL_REQ;
			rc = net_isend(l.sc, l.sbuf, SENT, g_rank, l.smh, &req);
		} while (rc == HX_SUCCESS && !req && now_s() < end);
		if (rc != HX_SUCCESS) {
			outcome = "isend refused";
		} else {
			CHECK(req && req != SENTINEL_REQ, "isend posted no request in %.0f s", g_timeout);
			do
				rc = T8->test(req, &done, &sz);
			while (rc == HX_SUCCESS && !done && now_s() < end);
			CHECK(rc != HX_SUCCESS || done,
			      "a %d-byte send into a %d-byte receive neither completed nor failed in "
			      "%.0f s",
			      SENT, POSTED, g_timeout);
			outcome = rc != HX_SUCCESS ? "test() of the send returned an error"
						   : "the send completed";
		}
	}
	barrier();
	net_deregmr(l.sc, l.smh);
	net_deregmr(l.rc, l.rmh);
	NCALL(T8->closeSend(l.sc));
	NCALL(T8->closeRecv(l.rc));
	say("%d-byte send into a %d-byte receive: %s; nothing written past the receive", SENT,
	    POSTED, outcome);
	barrier();
	net_finalize(ctx);
}

static void sc_reuse_listen(void)
{
	void *ctx = net_setup(0x800, 0);
	enum { C = 2, MSGS = 3, SZ = 300000 };
	if (g_rank == 1) {
		unsigned char handle[HX_HANDLE_MAXSIZE] = {0};
		void *lc, *rc[C] = {0}, *mh[C];
		unsigned char *buf[C];
		net_listen(ctx, 0, handle, &lc);
		oob_send(0, handle, sizeof handle);
		for (int c = 0; c < C; c++) {
			connect_accept(ctx, 0, NULL, NULL, lc, &rc[c]);
			say("accept %d on the same listen comm: recv comm %p", c + 1, rc[c]);
		}
		CHECK(rc[0] != rc[1], "two accepts returned the same recv comm %p", rc[0]);
		NCALL(T8->closeListen(lc));
		int map[C] = {-1, -1};
		for (int c = 0; c < C; c++) {
			buf[c] = xalloc(SZ);
			mh[c] = net_regmr(rc[c], buf[c], SZ + GUARD);
		}
		for (int m = 0; m < MSGS; m++) {
			hreq rr[C];
			hreq *all[C] = {&rr[0], &rr[1]};
			for (int c = 0; c < C; c++) {
				void *dp = buf[c];
				size_t posted = SZ;
				int tag = 0;
				memset(buf[c], 0xA5, SZ + GUARD);
				post_recv(&rr[c], rc[c], 1, &dp, &posted, &tag, &mh[c], 0, 0,
					  "recv on a reused-listen connection");
			}
			wait_all(all, C);
			for (int c = 0; c < C; c++) {
				size_t sz = (size_t)SZ - 1000u * (size_t)m;
				CHECK(rr[c].sizes[0] >= 0, "negative size");
				if (map[c] < 0) {
					/* which connect this accept belongs to: its first message */
					for (int k = 0; k < C; k++)
						if ((size_t)rr[c].sizes[0] == sz - (size_t)k &&
						    first_bad(buf[c], sz - (size_t)k,
							      mkseed(50, (uint32_t)k, (uint32_t)m)) ==
							SIZE_MAX)
							map[c] = k;
					CHECK(map[c] >= 0,
					      "accepted connection %d: first message (%d bytes) matches "
					      "neither connect",
					      c, rr[c].sizes[0]);
				}
				char what[96];
				snprintf(what, sizeof what,
					 "message %d on accepted connection %d (connect %d)", m, c,
					 map[c]);
				CHECK((size_t)rr[c].sizes[0] == sz - (size_t)map[c],
				      "%s: %d bytes reported, %zu sent", what, rr[c].sizes[0],
				      sz - (size_t)map[c]);
				check_pattern(buf[c], sz - (size_t)map[c],
					      mkseed(50, (uint32_t)map[c], (uint32_t)m), what);
			}
		}
		CHECK(map[0] != map[1], "both accepted connections carry connect %d's data", map[0]);
		for (int c = 0; c < C; c++) {
			net_deregmr(rc[c], mh[c]);
			NCALL(T8->closeRecv(rc[c]));
			free(buf[c]);
		}
		say("2 connections accepted on one listen comm, %d messages each, kept apart", MSGS);
	} else {
		unsigned char handle[HX_HANDLE_MAXSIZE], h[C][HX_HANDLE_MAXSIZE];
		void *sc[C] = {0}, *mh[C];
		unsigned char *buf[C];
		oob_recv(1, handle, sizeof handle);
		/* both connects polled together, each with its own copy of the handle (NCCL hands
		 * the same handle memory back on every retry of one connection) */
		memcpy(h[0], handle, sizeof handle);
		memcpy(h[1], handle, sizeof handle);
		double end = now_s() + g_timeout;
		while (!sc[0] || !sc[1]) {
			for (int c = 0; c < C; c++)
				if (!sc[c])
					net_connect(ctx, 0, h[c], &sc[c]);
			CHECK(now_s() < end, "two connects to one listen handle not done after %.0f s",
			      g_timeout);
			usleep(100);
		}
		CHECK(sc[0] != sc[1], "two connects returned the same send comm");
		for (int c = 0; c < C; c++) {
			buf[c] = xalloc(SZ);
			mh[c] = net_regmr(sc[c], buf[c], SZ);
		}
		for (int m = 0; m < MSGS; m++) {
			hreq sr[C];
			hreq *all[C] = {&sr[0], &sr[1]};
			for (int c = 0; c < C; c++) {
				size_t sz = (size_t)SZ - 1000u * (size_t)m - (size_t)c;
				fill(buf[c], sz, mkseed(50, (uint32_t)c, (uint32_t)m));
				post_send(&sr[c], sc[c], buf[c], sz, 0, mh[c],
					  "send on a reused-listen connection");
			}
			wait_all(all, C);
		}
		for (int c = 0; c < C; c++) {
			net_deregmr(sc[c], mh[c]);
			NCALL(T8->closeSend(sc[c]));
			free(buf[c]);
		}
		say("2 connects with one listen handle, %d messages each", MSGS);
	}
	barrier();
	net_finalize(ctx);
}

static void sc_ring(void)
{
	void *ctx = net_setup(0x900, 0);
	link_t l;
	int next = (g_rank + 1) % g_nranks, prev = (g_rank + g_nranks - 1) % g_nranks;
	size_t max = (size_t)env_num("HX_MAX_SIZE", 8 << 20);
	link_open(&l, ctx, 0, next, prev, max);
	static const size_t sizes[] = {0, 4096, (1 << 20) + 3, 8 << 20};
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		size_t sz = sizes[i] > max ? max : sizes[i];
		/* step s: forward what arrived in step s-1; after s steps this rank holds the data
		 * that rank (rank - s) started with */
		fill(l.sbuf, sz, mkseed((uint32_t)g_rank, 4242, (uint32_t)sz));
		for (int s = 1; s < g_nranks; s++) {
			hreq rr, sr;
			hreq *both[2] = {&rr, &sr};
			void *dp = l.rbuf;
			size_t posted = sz;
			int tag = prev;
			char what[96];
			memset(l.rbuf, 0xA5, max + GUARD);
			post_recv(&rr, l.rc, 1, &dp, &posted, &tag, &l.rmh, 0, 0, "ring recv");
			post_send(&sr, l.sc, l.sbuf, sz, g_rank, l.smh, "ring send");
			wait_all(both, 2);
			int origin = (g_rank - s + g_nranks) % g_nranks;
			CHECK(rr.sizes[0] == (int)sz, "ring step %d: %d bytes reported, %zu sent", s,
			      rr.sizes[0], sz);
			snprintf(what, sizeof what, "ring step %d, %zu bytes from rank %d via rank %d",
				 s, sz, origin, prev);
			check_pattern(l.rbuf, sz, mkseed((uint32_t)origin, 4242, (uint32_t)sz), what);
			check_const(l.rbuf + sz, GUARD, 0xA5, "bytes past a ring message");
			memcpy(l.sbuf, l.rbuf, sz);
		}
	}
	say("3-rank ring: send to rank %d, receive from rank %d; 4 sizes forwarded around the "
	    "whole ring, checked at every step",
	    next, prev);
	link_close(&l);
	barrier();
	net_finalize(ctx);
}

static void sc_multi_ctx(void)
{
	int peer = 1 - g_rank;
	if (g_ver < 11) {
		/* NCCL calls a v8-v10 plugin's init once per process; two communicators share it */
		void *ctx = net_setup(0xa00, 0);
		link_t a, b;
		link_open(&a, ctx, 0, peer, peer, 1 << 20);
		link_open(&b, ctx, 0, peer, peer, 1 << 20);
		exchange(&a, 65539, 65539, 0, 0, 1, 0);
		exchange(&b, 65539, 65539, 0, 0, 2, 0);
		link_close(&a);
		exchange(&b, 1 << 20, 1 << 20, 0, 0, 3, 0);
		link_close(&b);
		say("v%d: two communicators' connections on one init; closing one keeps the other "
		    "working",
		    g_ver);
	} else {
		void *ca = net_setup(0xa01, 0), *cb = net_setup(0xa02, 0);
		link_t a, b;
		link_open(&a, ca, 0, peer, peer, 1 << 20);
		link_open(&b, cb, 0, peer, peer, 1 << 20);
		exchange(&a, 65539, 65539, 0, 0, 1, 0);
		exchange(&b, 65539, 65539, 0, 0, 2, 0);
		link_close(&a);
		barrier();
		net_finalize(ca);
		exchange(&b, 1 << 20, 1 << 20, 0, 0, 3, 0);
		link_close(&b);
		barrier();
		net_finalize(cb);
		say("two init contexts (%p, %p); finalize of the first keeps the second working", ca,
		    cb);
		return;
	}
	barrier();
}

static void sc_reload(void)
{
	int peer = 1 - g_rank;
	for (int cycle = 0; cycle < 3; cycle++) {
		if (cycle)
			net_open(1);
		void *ctx = net_setup(0xb00 + (uint64_t)cycle, 0);
		link_t l;
		link_open(&l, ctx, 0, peer, peer, 1 << 20);
		exchange(&l, (1 << 20) - 5, 1 << 20, 0, 0, (uint32_t)cycle, 0);
		link_close(&l);
		barrier();
		net_finalize(ctx);
		net_close_lib();
		void *still = dlopen(g_path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
		say("cycle %d: init, connect, 1 MiB checked, finalize, dlclose (library %s)", cycle,
		    still ? "stayed mapped" : "unmapped");
		if (still)
			dlclose(still);
		usleep(100000); /* threads left behind would now run unmapped code */
	}
}

/* Median of n doubles (sorts them). */
static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* A TCP ping-pong between the two rank processes over 127.0.0.1, TCP_NODELAY, HX_SIZE bytes
 * each way, busy-polling non-blocking recv as NCCL's Socket transport's proxy does: the
 * reference the plugin's ping-pong is compared with. Returns the median half round trip, us. */
static double tcp_pingpong(size_t size, int iters, int warm, unsigned char *buf, double *rtt)
{
	int fd, one = 1;
	if (g_rank == 0) {
		int lfd = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a = {.sin_family = AF_INET,
					.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		socklen_t al = sizeof a;
		CHECK(lfd >= 0 && bind(lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(lfd, 1) == 0 &&
			      getsockname(lfd, (struct sockaddr *)&a, &al) == 0,
		      "latency: TCP listen: %s", strerror(errno));
		oob_send(1, &a.sin_port, sizeof a.sin_port);
		fd = accept(lfd, NULL, NULL);
		CHECK(fd >= 0, "latency: TCP accept: %s", strerror(errno));
		close(lfd);
	} else {
		struct sockaddr_in a = {.sin_family = AF_INET,
					.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		oob_recv(0, &a.sin_port, sizeof a.sin_port);
		fd = socket(AF_INET, SOCK_STREAM, 0);
		CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0,
		      "latency: TCP connect: %s", strerror(errno));
	}
	CHECK(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0,
	      "latency: TCP_NODELAY: %s", strerror(errno));
	for (int i = 0; i < warm + iters; i++) {
		double t0 = now_s();
		for (int turn = 0; turn < 2; turn++) {
			if ((turn == 0) == (g_rank == 0)) {
				for (size_t o = 0; o < size;) {
					ssize_t n = send(fd, buf + o, size - o, MSG_NOSIGNAL);
					CHECK(n > 0 || errno == EINTR || errno == EAGAIN,
					      "latency: TCP send: %s", strerror(errno));
					o += n > 0 ? (size_t)n : 0;
				}
			} else {
				for (size_t o = 0; o < size;) {
					ssize_t n = recv(fd, buf + o, size - o, MSG_DONTWAIT);
					CHECK(n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR)),
					      "latency: TCP recv: %s", n == 0 ? "peer closed" : strerror(errno));
					o += n > 0 ? (size_t)n : 0;
				}
			}
		}
		if (i >= warm)
			rtt[i - warm] = (now_s() - t0) * 1e6 / 2;
	}
	close(fd);
	return median(rtt, iters);
}

/* A ping-pong of HX_SIZE bytes (default 8192) through the plugin, HX_ITERS round trips
 * (default 5000, after 500 unmeasured), one connection each way; every receive is posted
 * before the peer's send can arrive (NCCL's proxy posts receives ahead), the bytes are checked
 * on every turn. Prints the median half round trip beside a TCP ping-pong of the same size
 * between the same two processes (the NET/Socket-shaped reference) and their ratio
 * (HX_NO_TCP=1 leaves the TCP ping-pong out: the plugin's own syscalls can then be counted). */
static void sc_latency(void)
{
	size_t size = (size_t)env_num("HX_SIZE", 8192);
	int iters = (int)env_num("HX_ITERS", 5000), warm = iters / 10;
	CHECK(size >= 16 && iters >= 1, "HX_SIZE >= 16, HX_ITERS >= 1");
	void *ctx = net_setup(0xa00, 0);
	int peer = 1 - g_rank;
	link_t l;
	link_open(&l, ctx, 0, peer, peer, size);
	double *rtt = calloc((size_t)iters, sizeof *rtt);
	/* HX_TRACE: per turn, receive done / irecv returned / isend called / isend returned; no
	 * clock read in the timed loop without it */
	const char *trace = getenv("HX_TRACE");
	int tracing = trace && *trace;
	double *tr = tracing ? calloc((size_t)(warm + iters) * 4, sizeof *tr) : NULL;
	CHECK(rtt != NULL && (tr != NULL || !tracing), "out of memory");
	barrier();
	hreq rr, sr;
	memset(&sr, 0, sizeof sr);
	sr.done = 1;
	int tag = peer;
	void *dp = l.rbuf;
	size_t posted = size;
	post_recv(&rr, l.rc, 1, &dp, &posted, &tag, &l.rmh, 0, 0, "latency recv");
	for (int i = 0; i < warm + iters; i++) {
		double t0 = now_s();
		for (int turn = 0; turn < 2; turn++) {
			if ((turn == 0) == (g_rank == 0)) {
				uint64_t v = (uint64_t)i << 1 | (uint64_t)g_rank;
				memcpy(l.sbuf, &v, 8);
				memcpy(l.sbuf + size - 8, &v, 8);
				while (!sr.done && !test_once(&sr))
					;
				if (tr)
					tr[i * 4 + 2] = now_s();
				post_send(&sr, l.sc, l.sbuf, size, g_rank, l.smh, "latency send");
				if (tr)
					tr[i * 4 + 3] = now_s();
			} else {
				/* the send completes whenever its acknowledgement comes; the receive is
				 * what the peer waits for */
				while (!rr.done && !test_once(&rr))
					if (!sr.done)
						test_once(&sr);
				if (tr)
					tr[i * 4] = now_s();
				uint64_t a, b, want = (uint64_t)i << 1 | (uint64_t)peer;
				memcpy(&a, l.rbuf, 8);
				memcpy(&b, l.rbuf + size - 8, 8);
				CHECK(rr.sizes[0] == (int)size && a == want && b == want,
				      "latency: turn %d: size %d, marks %llx/%llx, expected %llx", i,
				      rr.sizes[0], (unsigned long long)a, (unsigned long long)b,
				      (unsigned long long)want);
				if (i + 1 < warm + iters)
					post_recv(&rr, l.rc, 1, &dp, &posted, &tag, &l.rmh, 0, 0,
						  "latency recv");
				if (tr)
					tr[i * 4 + 1] = now_s();
			}
		}
		if (i >= warm)
			rtt[i - warm] = (now_s() - t0) * 1e6 / 2;
	}
	while (!sr.done && !test_once(&sr))
		;
	double mine = median(rtt, iters);
	if (tr) {
		char fn[PATH_MAX];
		snprintf(fn, sizeof fn, "%s.%d", trace, g_rank);
		FILE *f = fopen(fn, "w");
		CHECK(f != NULL, "HX_TRACE: cannot write %s: %s", fn, strerror(errno));
		fprintf(f, "pid %d\n", (int)getpid());
		for (int k = 0; k < warm + iters; k++)
			fprintf(f, "%d %.9f %.9f %.9f %.9f\n", k, tr[k * 4], tr[k * 4 + 1],
				tr[k * 4 + 2], tr[k * 4 + 3]);
		CHECK(fclose(f) == 0, "HX_TRACE: writing %s: %s", fn, strerror(errno));
	}
	free(tr);
	barrier();
	/* HX_NO_TCP=1: no TCP reference (for counting the plugin's own syscalls); prints 1.00 us */
	double tcp = getenv("HX_NO_TCP") ? 1.0 : tcp_pingpong(size, iters, warm, l.sbuf, rtt);
	say("%zu-byte ping-pong, %d round trips: plugin %.2f us, TCP %.2f us half round trip "
	    "(medians): %.2fx",
	    size, iters, mine, tcp, mine / tcp);
	free(rtt);
	barrier();
	link_close(&l);
	net_finalize(ctx);
}

/* ---------- driver ---------- */

/* NCCL's proxy shape for throughput: HX_CHANNELS connections each way (NCCL's channels), every
 * one with NCCL_STEPS = 8 chunks of HX_CHUNK bytes in flight per direction, both directions at
 * once, one thread testing round robin; runs HX_SECONDS. Each chunk carries its sequence number
 * in its first and last 8 bytes, checked on receipt (the payload itself is not checked: this
 * is a benchmark of the plugin's data path, `sizes` and `inflight` check every byte). */
static void sc_bandwidth(void)
{
	enum { STEPS = 8, MAXCH = 16 };
	const uint64_t LAST = 1ull << 63;
	int nch = (int)env_num("HX_CHANNELS", 2);
	size_t chunk = (size_t)env_num("HX_CHUNK", 512 << 10);
	double secs = env_num("HX_SECONDS", 3);
	CHECK(nch >= 1 && nch <= MAXCH && chunk >= 16, "HX_CHANNELS 1..%d, HX_CHUNK >= 16", MAXCH);
	void *ctx = net_setup(0x900, 0);
	int peer = 1 - g_rank;
	static link_t l[MAXCH];
	static hreq rr[MAXCH][STEPS], sr[MAXCH][STEPS];
	static long ns[MAXCH], nr[MAXCH], ds[MAXCH], dr[MAXCH];
	static int sent_last[MAXCH], got_last[MAXCH];
	for (int c = 0; c < nch; c++)
		link_open(&l[c], ctx, 0, peer, peer, chunk * STEPS);
	barrier();
	struct rusage ru0;
	getrusage(RUSAGE_SELF, &ru0);
	double t0 = now_s(), stop = t0 + secs, end = stop + g_timeout;
	long recvd = 0, sent = 0;
	for (;;) {
		double t = now_s();
		int left = 0;
		CHECK(t < end, "bandwidth: stalled (%ld chunks received, %ld sent)", recvd, sent);
		for (int c = 0; c < nch; c++) {
			int tag = l[c].from;
			while (!got_last[c] && nr[c] - dr[c] < STEPS) {
				void *dp = l[c].rbuf + (size_t)(nr[c] % STEPS) * chunk;
				size_t posted = chunk;
				post_recv(&rr[c][nr[c] % STEPS], l[c].rc, 1, &dp, &posted, &tag,
					  &l[c].rmh, 0, 0, "bandwidth recv");
				nr[c]++;
			}
			while (!sent_last[c] && ns[c] - ds[c] < STEPS) {
				unsigned char *p = l[c].sbuf + (size_t)(ns[c] % STEPS) * chunk;
				uint64_t seq = (uint64_t)ns[c];
				if (t >= stop) {
					seq |= LAST;
					sent_last[c] = 1;
				}
				memcpy(p, &seq, 8);
				memcpy(p + chunk - 8, &seq, 8);
				post_send(&sr[c][ns[c] % STEPS], l[c].sc, p, chunk, g_rank, l[c].smh,
					  "bandwidth send");
				ns[c]++;
			}
			if (ds[c] < ns[c]) {
				hreq *r = &sr[c][ds[c] % STEPS];
				if (r->done || test_once(r)) {
					ds[c]++;
					sent++;
				}
			}
			if (dr[c] < nr[c] && !got_last[c]) {
				hreq *r = &rr[c][dr[c] % STEPS];
				if (r->done || test_once(r)) {
					unsigned char *p = l[c].rbuf + (size_t)(dr[c] % STEPS) * chunk;
					uint64_t a, b;
					memcpy(&a, p, 8);
					memcpy(&b, p + chunk - 8, 8);
					CHECK(r->sizes[0] == (int)chunk && (a & ~LAST) == (uint64_t)dr[c] &&
						      a == b,
					      "bandwidth: channel %d chunk %ld: size %d, sequence %llx/%llx",
					      c, dr[c], r->sizes[0], (unsigned long long)a,
					      (unsigned long long)b);
					got_last[c] = (a & LAST) != 0;
					dr[c]++;
					recvd++;
				}
			}
			left += !sent_last[c] || ds[c] < ns[c] || !got_last[c];
		}
		if (!left)
			break;
	}
	double dt = now_s() - t0;
	struct rusage ru1;
	getrusage(RUSAGE_SELF, &ru1);
	double cpu = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) +
		     (double)(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
		     (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) / 1e6 +
		     (double)(ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) / 1e6;
	/* CPU time of this process (every thread) per GB it sent and received: a measure of work
	 * per byte that a busy machine does not distort as much as MB/s */
	say("%d channel(s), %d x %zu-byte chunks in flight each way per channel: sent %.1f MB/s, "
	    "received %.1f MB/s (%.2f s), CPU %.2f s per GB sent+received",
	    nch, STEPS, chunk, sent * (double)chunk / 1e6 / dt, recvd * (double)chunk / 1e6 / dt,
	    dt, cpu / ((sent + recvd) * (double)chunk / 1e9));
	barrier();
	/* the receives posted past each channel's last chunk are closed with their comm */
	for (int c = 0; c < nch; c++)
		link_close(&l[c]);
	net_finalize(ctx);
}

struct scenario {
	const char *name;
	int ranks;
	void (*run)(void);
	int min_ver; /* scenario skipped below this version */
};

static const struct scenario scenarios[] = {
    {"props", 1, sc_props, 8},
    {"selfloop", 1, sc_selfloop, 8},
    {"sizes", 2, sc_sizes, 8},
    {"smaller", 2, sc_smaller, 8},
    {"grouped", 2, sc_grouped, 8},
    {"inflight", 2, sc_inflight, 8},
    {"threads", 2, sc_threads, 8},
    {"close_inflight", 2, sc_close_inflight, 8},
    {"reuse_listen", 2, sc_reuse_listen, 8},
    {"oversize", 2, sc_oversize, 8},
    {"ring", 3, sc_ring, 8},
    {"multi_ctx", 2, sc_multi_ctx, 8},
    /* NCCL >= 2.28 dlcloses after the last finalize; v8-v10 have no finalize, and the NCCLs
     * that load them never dlclose */
    {"reload", 2, sc_reload, 11},
    /* benchmarks, not run by the tests */
    {"bandwidth", 2, sc_bandwidth, 8},
    {"latency", 2, sc_latency, 8},
};

/* HX_RANK_ENV: NAME=VALUE with "%r" -> rank + 1, set before the plugin is loaded. */
static void rank_env(void)
{
	const char *spec = getenv("HX_RANK_ENV");
	char name[128], value[1024];
	size_t o = 0;
	const char *eq = spec ? strchr(spec, '=') : NULL;
	if (!spec || !*spec)
		return;
	CHECK(eq && eq != spec && (size_t)(eq - spec) < sizeof name,
	      "HX_RANK_ENV=%s: expected NAME=VALUE", spec);
	memcpy(name, spec, (size_t)(eq - spec));
	name[eq - spec] = 0;
	for (const char *p = eq + 1; *p && o + 16 < sizeof value; p++) {
		if (p[0] == '%' && p[1] == 'r') {
			o += (size_t)snprintf(value + o, sizeof value - o, "%d", g_rank + 1);
			p++;
		} else {
			value[o++] = *p;
		}
	}
	value[o] = 0;
	setenv(name, value, 1);
	if (g_rank == 0)
		say("every rank sets %s (rank 0: %s)", name, value);
}

static void child(const struct scenario *s)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	rank_env();
	net_open(g_rank != 0);
	s->run();
	say("done: %ld logger calls (%ld NET), %ld NULL isend / %ld NULL irecv retries, slowest "
	    "listen/connect/accept call %.1f ms",
	    g_log_lines, g_log_net_lines, g_null_sends, g_null_recvs, g_max_call_ms);
	fflush(stdout);
	fflush(stderr);
	_exit(0);
}

/* Runs s for version ver in fresh processes; returns 0 on success. */
static int run_version(const struct scenario *s, int ver)
{
	int fds[MAX_RANKS][MAX_RANKS];
	pid_t pids[MAX_RANKS];
	int status[MAX_RANKS], alive = s->ranks, failed = 0;
	double limit = env_num("HX_SCENARIO_S", 300), t0 = now_s(), fail_at = 0;
	g_ver = ver;
	g_rank = 0;
	for (int i = 0; i < s->ranks; i++)
		for (int j = i + 1; j < s->ranks; j++) {
			int sv[2];
			CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair: %s",
			      strerror(errno));
			fds[i][j] = sv[0];
			fds[j][i] = sv[1];
		}
	fflush(stdout);
	fflush(stderr);
	for (int r = 0; r < s->ranks; r++) {
		pid_t p = fork();
		CHECK(p >= 0, "fork: %s", strerror(errno));
		if (p == 0) {
			g_rank = r;
			g_nranks = s->ranks;
			for (int i = 0; i < s->ranks; i++)
				for (int j = 0; j < s->ranks; j++)
					if (i != j && i != r)
						close(fds[i][j]);
			for (int j = 0; j < s->ranks; j++)
				if (j != r)
					g_oob[j] = fds[r][j];
			child(s);
		}
		pids[r] = p;
		status[r] = -1;
	}
	for (int i = 0; i < s->ranks; i++)
		for (int j = 0; j < s->ranks; j++)
			if (i != j)
				close(fds[i][j]);
	while (alive) {
		int st;
		pid_t p = waitpid(-1, &st, WNOHANG);
		if (p > 0) {
			for (int r = 0; r < s->ranks; r++)
				if (pids[r] == p) {
					status[r] = st;
					alive--;
					if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
						if (!failed)
							fail_at = now_s();
						failed = 1;
						if (WIFSIGNALED(st))
							printf("[%s v%d r%d] FAIL: killed by signal %d "
							       "(%s)\n",
							       s->name, ver, r, WTERMSIG(st),
							       strsignal(WTERMSIG(st)));
					}
				}
			continue;
		}
		double t = now_s();
		int timeout = t - t0 > limit;
		if (timeout || (failed && t - fail_at > 3.0)) {
			for (int r = 0; r < s->ranks; r++)
				if (status[r] == -1) {
					printf("[%s v%d r%d] FAIL: %s; killing it\n", s->name, ver, r,
					       timeout ? "scenario time limit (HX_SCENARIO_S) reached"
						       : "still running 3 s after another rank failed");
					kill(pids[r], SIGKILL);
				}
			failed = 1;
			while (alive) {
				pid_t q = waitpid(-1, NULL, 0);
				for (int r = 0; r < s->ranks; r++)
					if (pids[r] == q && status[r] == -1) {
						status[r] = 0;
						alive--;
					}
			}
			break;
		}
		usleep(10000);
	}
	printf("%s: %s v%d (%d process%s, %.1f s)\n", failed ? "FAIL" : "PASS", s->name, ver,
	       s->ranks, s->ranks > 1 ? "es" : "", now_s() - t0);
	fflush(stdout);
	return failed;
}

/* `load`: in this process, every requested version's symbol, table and name. */
static int run_load(const int *vers, int nv)
{
	for (int i = 0; i < nv; i++) {
		g_ver = vers[i];
		net_open(0);
		net_close_lib();
	}
	printf("PASS: load (%d version%s)\n", nv, nv > 1 ? "s" : "");
	return 0;
}

int main(int argc, char **argv)
{
	int vers[8], nv = 0, failed = 0;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3) {
		fprintf(stderr, "usage: %s PLUGIN_SO SCENARIO [VERSIONS]\nscenarios: load", argv[0]);
		for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
			fprintf(stderr, " %s", scenarios[i].name);
		fprintf(stderr, "\n");
		return 2;
	}
	g_path = argv[1];
	g_scn = argv[2];
	g_timeout = env_num("HX_TIMEOUT_S", 60);
	g_block_ms = env_num("HX_BLOCK_MS", 2000);
	g_loglevel = (int)env_num("HX_LOG_LEVEL", HX_LOG_INFO);
	{
		char list[64];
		snprintf(list, sizeof list, "%s", argc > 3 ? argv[3] : "8,9,10,11,12");
		for (char *t = strtok(list, ","); t && nv < 8; t = strtok(NULL, ",")) {
			int v = atoi(t);
			if (v < 8 || v > 12) {
				fprintf(stderr, "version %s: only 8..12 are driven\n", t);
				return 2;
			}
			vers[nv++] = v;
		}
	}
	if (!strcmp(g_scn, "load"))
		return run_load(vers, nv);
	for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++) {
		const struct scenario *s = &scenarios[i];
		if (strcmp(s->name, g_scn))
			continue;
		for (int k = 0; k < nv; k++) {
			if (vers[k] < s->min_ver) {
				printf("SKIP: %s v%d (the scenario needs v%d+)\n", s->name, vers[k],
				       s->min_ver);
				continue;
			}
			failed |= run_version(s, vers[k]);
		}
		return failed;
	}
	fprintf(stderr, "unknown scenario %s\n", g_scn);
	return 2;
}
