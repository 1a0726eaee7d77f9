//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package proctrack

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ringReader consumes a BPF ring buffer (BPF_MAP_TYPE_RINGBUF) through its
// mmap'd pages, without a system call: the library's reader
// (cilium/ebpf/ringbuf) makes an epoll_wait(2) at each read, and a record
// whose accept is not indexed yet reads the ring, so that was a system
// call (and a wakeup of the runtime's sysmon thread) per handshake. Readiness
// is the watcher's business (acceptLoaded.watch, in Go's poller).
//
// The layout is the kernel's (kernel/bpf/ringbuf.c, as libbpf reads it):
// page 0 holds the consumer position (written by the reader); from page 1,
// read-only, the producer position, then the data pages mapped twice in a
// row so a record that wraps reads as one slice. Every record starts with
// an 8-byte header: its length, with a busy bit while the program writes
// it and a discard bit when it gave it up, and records are 8-byte aligned.
type ringReader struct {
	cons, prod []byte // the two mappings
	data       []byte // 2*size bytes after the producer page
	mask       uint64
}

const (
	ringBusyBit    = 1 << 31
	ringDiscardBit = 1 << 30
	ringHdrSize    = 8
)

// newRingReader maps the ring buffer map fd of size bytes (its
// max_entries, a power of two multiple of the page size).
func newRingReader(fd int, size int) (*ringReader, error) {
	if size <= 0 || size&(size-1) != 0 {
		return nil, fmt.Errorf("ring buffer size %d is not a power of two", size)
	}
	page := os.Getpagesize()
	cons, err := unix.Mmap(fd, 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap consumer page: %w", err)
	}
	prod, err := unix.Mmap(fd, int64(page), page+2*size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		unix.Munmap(cons)
		return nil, fmt.Errorf("mmap producer and data pages: %w", err)
	}
	return &ringReader{cons: cons, prod: prod, data: prod[page:], mask: uint64(size - 1)}, nil
}

func (r *ringReader) consPos() *uint64 { return (*uint64)(unsafe.Pointer(&r.cons[0])) }
func (r *ringReader) prodPos() *uint64 { return (*uint64)(unsafe.Pointer(&r.prod[0])) }

// available is the bytes the producer has reserved past the consumer
// (records being written included).
func (r *ringReader) available() uint64 {
	return atomic.LoadUint64(r.prodPos()) - atomic.LoadUint64(r.consPos())
}

// errRingCorrupt: a record header that cannot be (a length past the ring).
var errRingCorrupt = errors.New("ring buffer record longer than the ring")

// read calls fn with every committed record from the consumer position on,
// in order, and advances the consumer past each (fn's slice points into the
// ring: valid only during the call). It stops at the producer position or
// at a record still being written, and returns how many records it passed
// to fn.
func (r *ringReader) read(fn func([]byte)) (int, error) {
	n := 0
	cons := atomic.LoadUint64(r.consPos())
	for {
		prod := atomic.LoadUint64(r.prodPos())
		if cons >= prod {
			return n, nil
		}
		for cons < prod {
			off := cons & r.mask
			hdr := atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.data[off])))
			if hdr&ringBusyBit != 0 {
				return n, nil
			}
			l := uint64(hdr &^ (ringBusyBit | ringDiscardBit))
			if l > r.mask {
				return n, errRingCorrupt
			}
			if hdr&ringDiscardBit == 0 {
				start := off + ringHdrSize
				fn(r.data[start : start+l : start+l])
				n++
			}
			cons += (l + ringHdrSize + 7) &^ 7
			atomic.StoreUint64(r.consPos(), cons)
		}
	}
}

// skip moves the consumer to the producer, giving up what is there; it
// returns the bytes given up in records of the accept event's size.
func (r *ringReader) skip() uint64 {
	prod := atomic.LoadUint64(r.prodPos())
	cons := atomic.LoadUint64(r.consPos())
	atomic.StoreUint64(r.consPos(), prod)
	return (prod - cons) / (eventSize + ringHdrSize)
}

func (r *ringReader) close() error {
	return errors.Join(unix.Munmap(r.prod), unix.Munmap(r.cons))
}
