/*
 * A deliberately broken NCCL net plugin for the harness's own test: it loads the real plugin
 * (HX_REAL_PLUGIN, dlopen RTLD_NOW | RTLD_LOCAL), exports ncclNetPlugin_v11 forwarding to the
 * real plugin's v11 table, and injects one fault chosen by HX_FAULT, each a mistake a plugin has
 * made or could make:
 *   posted_size     test() reports the posted receive size instead of the received one
 *   no_send_size    test() of a send leaves sizes[0] unwritten
 *   corrupt         one received byte is flipped before test() reports done
 *   props_overrun   getProperties writes 16 bytes past the v11 struct (a v12 layout)
 *   stale_request   the first irecv returns success without writing *request
 *   block_connect   the first connect sleeps 3 s (blocking the proxy thread)
 *   null_ndevs      getProperties reports vProps.ndevs = 0
 * tests/tests/nccl_plugin_harness.rs checks that the harness fails on each with its message.
 * Built with: cc -shared -fPIC -o libfaulty.so faulty.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net_abi.h"

static const hx_net_v11 *real;
static const char *fault = "";
static int first_irecv = 1, first_connect = 1;

typedef struct {
	void *req;
	int is_recv, n;
	size_t posted[8];
	void *data[8];
} wreq;

static int is(const char *f)
{
	return !strcmp(fault, f);
}

static hx_result w_init(void **ctx, uint64_t id, hx_comm_config *cfg, hx_logger log,
			hx_profiler_cb prof)
{
	const char *path = getenv("HX_REAL_PLUGIN");
	void *lib;
	fault = getenv("HX_FAULT") ? getenv("HX_FAULT") : "";
	if (!real) {
		if (!path || !(lib = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
			fprintf(stderr, "faulty: cannot load HX_REAL_PLUGIN=%s: %s\n",
				path ? path : "(unset)", dlerror());
			return HX_SYSTEM_ERROR;
		}
		real = dlsym(lib, "ncclNetPlugin_v11");
		if (!real)
			return HX_SYSTEM_ERROR;
	}
	return real->init(ctx, id, cfg, log, prof);
}

static hx_result w_devices(int *n)
{
	return real->devices(n);
}

static hx_result w_props(int dev, hx_props_v11 *p)
{
	hx_result r = real->getProperties(dev, p);
	if (is("props_overrun"))
		memset((char *)p + sizeof *p, 0, 16);
	if (is("null_ndevs"))
		p->vProps.ndevs = 0;
	return r;
}

static hx_result w_listen(void *ctx, int dev, void *h, void **lc)
{
	return real->listen(ctx, dev, h, lc);
}

static hx_result w_connect(void *ctx, int dev, void *h, void **sc, hx_dev_handle **dh)
{
	if (is("block_connect") && first_connect) {
		first_connect = 0;
		sleep(3);
	}
	return real->connect(ctx, dev, h, sc, dh);
}

static hx_result w_accept(void *lc, void **rc, hx_dev_handle **dh)
{
	return real->accept(lc, rc, dh);
}

static hx_result w_regmr(void *c, void *d, size_t s, int t, void **mh)
{
	return real->regMr(c, d, s, t, mh);
}

static hx_result w_deregmr(void *c, void *mh)
{
	return real->deregMr(c, mh);
}

static hx_result w_isend(void *sc, void *d, size_t s, int tag, void *mh, void *ph, void **req)
{
	void *r = NULL;
	hx_result res = real->isend(sc, d, s, tag, mh, ph, &r);
	*req = NULL;
	if (res == HX_SUCCESS && r) {
		wreq *w = calloc(1, sizeof *w);
		w->req = r;
		*req = w;
	}
	return res;
}

static hx_result w_irecv(void *rc, int n, void **d, size_t *s, int *tags, void **mhs, void **ph,
			 void **req)
{
	void *r = NULL;
	if (is("stale_request") && first_irecv) {
		first_irecv = 0;
		return HX_SUCCESS;
	}
	hx_result res = real->irecv(rc, n, d, s, tags, mhs, ph, &r);
	*req = NULL;
	if (res == HX_SUCCESS && r) {
		wreq *w = calloc(1, sizeof *w);
		w->req = r;
		w->is_recv = 1;
		w->n = n;
		for (int i = 0; i < n && i < 8; i++) {
			w->posted[i] = s[i];
			w->data[i] = d[i];
		}
		*req = w;
	}
	return res;
}

static hx_result w_test(void *req, int *done, int *sizes)
{
	wreq *w = req;
	hx_result r = real->test(w->req, done, sizes);
	if (r != HX_SUCCESS || !*done)
		return r;
	if (w->is_recv && is("posted_size"))
		for (int i = 0; i < w->n; i++)
			sizes[i] = (int)w->posted[i];
	if (!w->is_recv && is("no_send_size"))
		sizes[0] = -7;
	if (w->is_recv && is("corrupt") && sizes[0] > 0)
		((unsigned char *)w->data[0])[sizes[0] / 2] ^= 0x40;
	free(w);
	return r;
}

static hx_result w_close_send(void *c)
{
	return real->closeSend(c);
}

static hx_result w_close_recv(void *c)
{
	return real->closeRecv(c);
}

static hx_result w_close_listen(void *c)
{
	return real->closeListen(c);
}

static hx_result w_finalize(void *ctx)
{
	return real->finalize(ctx);
}

__attribute__((visibility("default"))) const hx_net_v11 ncclNetPlugin_v11 = {
    .name = "rdmesh",
    .init = w_init,
    .devices = w_devices,
    .getProperties = w_props,
    .listen = w_listen,
    .connect = w_connect,
    .accept = w_accept,
    .regMr = w_regmr,
    .deregMr = w_deregmr,
    .isend = w_isend,
    .irecv = w_irecv,
    .test = w_test,
    .closeSend = w_close_send,
    .closeRecv = w_close_recv,
    .closeListen = w_close_listen,
    .finalize = w_finalize,
};
