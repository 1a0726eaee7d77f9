package capture

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// blockReader reads a TPACKET_V3 ring through a mapping of its own: block
// by block, packet by packet, handing a block back to the kernel once its
// last packet was used. It replaces afpacket.TPacket's reader, which polls
// the socket with a system call each time it finds the next block not
// ready: once per drain of the ring, and the first system call after the
// Go runtime's sysmon thread went to deep sleep wakes it (and has it poll
// every 20 µs for a while), which cost more than the reads. Here whether
// the next block is ready is a load from the block's header, for the worker
// and for the ring's watcher alike (ready).
//
// The layout is the kernel's (include/uapi/linux/if_packet.h): blocks of
// blockSize bytes, each starting with a struct tpacket_block_desc whose
// block_status says who owns it (TP_STATUS_USER once retired), num_pkts
// and offset_to_first_pkt where its packets are; each packet starts with a
// struct tpacket3_hdr (tp_next_offset, tp_sec, tp_nsec, tp_snaplen, tp_mac).
type blockReader struct {
	mem       []byte
	closed    atomic.Bool
	blockSize int
	nblocks   int

	// next is the block the reader reads now or waits for: written by the
	// worker, read by the watcher (ready).
	next atomic.Uint32
	held bool   // the worker holds block next (it is TP_STATUS_USER)
	base int    // offset in mem of the held block
	left uint32 // packets of the held block not read yet
	off  int    // offset in mem of the next packet of the held block
	// skipped counts blocks whose rest was skipped past a packet header
	// no kernel writes (the worker logs them; only it reads this).
	skipped uint64
}

// Offsets in struct tpacket_block_desc (its tpacket_hdr_v1 at 8) and in
// struct tpacket3_hdr.
const (
	bdStatus    = 8
	bdNumPkts   = 12
	bdFirstPkt  = 16
	phNext      = 0
	phSec       = 4
	phNsec      = 8
	phSnaplen   = 12
	phMac       = 24
	tpStatusUsr = unix.TP_STATUS_USER
)

// newBlockReader maps the ring of the TPACKET_V3 socket fd (nblocks blocks
// of blockSize bytes, as it was set up) once more, for reading.
func newBlockReader(fd, blockSize, nblocks int) (*blockReader, error) {
	mem, err := unix.Mmap(fd, 0, blockSize*nblocks, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("capture: mmap ring: %w", err)
	}
	return &blockReader{mem: mem, blockSize: blockSize, nblocks: nblocks}, nil
}

func (b *blockReader) u32(off int) uint32 {
	return *(*uint32)(unsafe.Pointer(&b.mem[off]))
}

func (b *blockReader) status(block int) *uint32 {
	return (*uint32)(unsafe.Pointer(&b.mem[block*b.blockSize+bdStatus]))
}

// ready says whether read would return a packet without waiting: the
// worker holds a block with packets left, or the block it waits for was
// retired. Safe from any goroutine while the reader is open (the worker's
// fields are only read by the worker).
func (b *blockReader) ready() bool {
	return atomic.LoadUint32(b.status(int(b.next.Load())))&tpStatusUsr != 0
}

// read returns the next packet and its timestamp; ok is false when the
// ring holds none now. data points into the ring: valid until the next
// read. Only the ring's worker calls it.
func (b *blockReader) read() (data []byte, ts time.Time, ok bool) {
	for b.left == 0 {
		cur := int(b.next.Load())
		if b.held {
			// Every packet of the block was used: give it back.
			atomic.StoreUint32(b.status(cur), unix.TP_STATUS_KERNEL)
			b.held = false
			cur = (cur + 1) % b.nblocks
			b.next.Store(uint32(cur))
		}
		if atomic.LoadUint32(b.status(cur))&tpStatusUsr == 0 {
			return nil, time.Time{}, false
		}
		b.held, b.base = true, cur*b.blockSize
		b.left = b.u32(b.base + bdNumPkts) // 0: a block retired empty, given back at once
		b.off = b.base + int(b.u32(b.base+bdFirstPkt))
	}
	p, block := b.off, b.base
	if p < block || p+phMac+2 > block+b.blockSize {
		b.left = 0 // an offset no kernel writes: skip the rest of the block
		b.skipped++
		return b.read()
	}
	mac, snap := int(*(*uint16)(unsafe.Pointer(&b.mem[p+phMac]))), int(b.u32(p+phSnaplen))
	start := p + mac
	if start < block || start+snap > block+b.blockSize {
		// A header no kernel writes: skip the rest of the block.
		b.left = 0
		b.skipped++
		return b.read()
	}
	data = b.mem[start : start+snap : start+snap]
	ts = time.Unix(int64(b.u32(p+phSec)), int64(b.u32(p+phNsec)))
	b.left--
	if n := b.u32(p + phNext); n != 0 {
		b.off = p + int(n)
	} else {
		b.off = p + tpAlign(mac+snap)
	}
	return data, ts, true
}

// tpAlign is TPACKET_ALIGN: 16-byte alignment.
func tpAlign(n int) int { return (n + 15) &^ 15 }

// close unmaps the ring; nothing may read it after (the ring's watcher has
// returned, see ring.close). mem itself is left as it is: the watcher read
// it last.
func (b *blockReader) close() error {
	if !b.closed.CompareAndSwap(false, true) {
		return nil
	}
	return unix.Munmap(b.mem)
}
