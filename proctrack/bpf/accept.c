// SPDX-License-Identifier: GPL-2.0
/* accept.c: one event per successful accept(2)/accept4(2), with the new
 * socket's addresses and the accepting process, through a ring buffer. */
#include "accept.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "GPL";

#define AF_INET 2
#define AF_INET6 10

/* Keep in step with acceptEvent in accept.go. */
struct event {
	__u64 ts_ns; /* bpf_ktime_get_ns: CLOCK_MONOTONIC */
	__u32 tgid;
	__u32 tid;
	__u16 family;
	__u16 lport; /* host order */
	__u16 rport; /* host order */
	__u16 pad;
	__u8 laddr[16]; /* IPv4 in the first 4 bytes */
	__u8 raddr[16];
};

/* Emits struct event into BTF for bpf2go -type event. */
const struct event *unused_event __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} events SEC(".maps");

/* Wakeups: waking the reader costs most of this program's time (some 6 us
 * of 6.5 per accept on a small VM, against 0.25 us without), and every
 * wakeup costs pqwatch more than indexing the events it brings. Events are
 * submitted without a wakeup: the ring is drained every second, and
 * a record whose accept is not indexed yet drains it itself. One wakeup is
 * forced only when the ring holds WAKEUP_BYTES or more (a burst: a quarter
 * of the ring, 4,096 accepts). Keep in step with the reader in
 * accept_linux.go (acceptLoaded.watch and sync). */
#define WAKEUP_BYTES (256 * 1024)

/* counters[0]: events dropped (ring buffer full); counters[1]: accepts
 * whose socket could not be read. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* The quiet processes: the serving processes of the one server generation
 * pqwatch chose, outside swaps. Their accepts are counted and not
 * reported, and every other process's accept is: so a connection with no
 * event, while nothing was missed, was accepted by one of them, and
 * pqwatch knows their generation without this program reading the socket
 * (some 0.9 us of cold cache lines an accept) or writing the ring (0.5
 * us). A process is quiet when the slot its tgid selects (its low bits)
 * holds its tgid; two quiet processes that select one slot leave one of
 * them reported. An array, not a hash: the lookup is inlined and reads one
 * cache line, the count's too. pqwatch writes the slots and reads the
 * counts through a mapping of the array, without system calls. Keep in
 * step with acceptLoaded.setQuiet in accept_linux.go. */
#define QUIET_SLOTS 1024
struct quiet_slot {
	__u32 tgid;
	__u32 pad;
	__u64 accepts;
};
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, QUIET_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct quiet_slot);
} quiet SEC(".maps");

/* missed[0]: accepts of processes outside the quiet set that were not
 * reported (ring buffer full, socket unreadable), read by pqwatch through
 * a mapping of the array: no system call per record. While it does not
 * move, "no event" means "a quiet process". */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} missed SEC(".maps");

/* The sys_exit_* tracepoint format: common fields, __syscall_nr, ret. */
struct sys_exit_ctx {
	__u64 common;
	__s32 nr;
	__s32 pad;
	__s64 ret;
};

static __always_inline void count(__u32 i)
{
	__u64 *n = bpf_map_lookup_elem(&counters, &i);
	if (n)
		__sync_fetch_and_add(n, 1);
}

static __always_inline void miss(__u32 i)
{
	count(i);
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&missed, &zero);
	if (n)
		__sync_fetch_and_add(n, 1);
}

static __always_inline int on_accept(struct sys_exit_ctx *ctx)
{
	__s64 fd = ctx->ret;
	if (fd < 0)
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	__u32 slot = tgid & (QUIET_SLOTS - 1);
	struct quiet_slot *q = bpf_map_lookup_elem(&quiet, &slot);
	if (q && q->tgid == tgid) {
		__sync_fetch_and_add(&q->accepts, 1);
		return 0;
	}
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	if (!fdt || fd >= BPF_CORE_READ(fdt, max_fds)) {
		miss(1);
		return 0;
	}
	struct file **fds = BPF_CORE_READ(fdt, fd);
	struct file *f = 0;
	if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) || !f) {
		miss(1);
		return 0;
	}
	struct socket *so = BPF_CORE_READ(f, private_data);
	struct sock *sk = so ? BPF_CORE_READ(so, sk) : 0;
	if (!sk) {
		miss(1);
		return 0;
	}
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (family != AF_INET && family != AF_INET6)
		return 0; /* unix sockets and the like */

	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		miss(0);
		return 0;
	}
	e->ts_ns = bpf_ktime_get_ns();
	e->tgid = tgid;
	e->tid = (__u32)id;
	e->family = family;
	e->lport = BPF_CORE_READ(sk, __sk_common.skc_num);
	e->rport = __builtin_bswap16(BPF_CORE_READ(sk, __sk_common.skc_dport));
	e->pad = 0;
	__builtin_memset(e->laddr, 0, sizeof(e->laddr));
	__builtin_memset(e->raddr, 0, sizeof(e->raddr));
	if (family == AF_INET) {
		bpf_core_read(e->laddr, 4, &sk->__sk_common.skc_rcv_saddr);
		bpf_core_read(e->raddr, 4, &sk->__sk_common.skc_daddr);
	} else {
		bpf_core_read(e->laddr, 16, &sk->__sk_common.skc_v6_rcv_saddr);
		bpf_core_read(e->raddr, 16, &sk->__sk_common.skc_v6_daddr);
	}
	__u64 flags = BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= WAKEUP_BYTES)
		flags = BPF_RB_FORCE_WAKEUP;
	bpf_ringbuf_submit(e, flags);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_accept4")
int exit_accept4(struct sys_exit_ctx *ctx) { return on_accept(ctx); }

SEC("tracepoint/syscalls/sys_exit_accept")
int exit_accept(struct sys_exit_ctx *ctx) { return on_accept(ctx); }
