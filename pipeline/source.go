package pipeline

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/pqwatch/pqwatch/capture"
	"github.com/pqwatch/pqwatch/report"
	"github.com/pqwatch/pqwatch/sniffer"
)

// Source feeds packets to a pipeline's workers: Run hands worker i's
// packets to p.Workers()[i] from one goroutine per worker, until the
// source ends or ctx does.
type Source interface {
	Workers() int
	Run(ctx context.Context, p *Pipeline) error
}

// Files is the offline source: capture files (pcap or pcapng, plain or
// gzip) read in order by one worker; "-" is Stdin. Each file's views are
// merged, not two files' (the same capture given twice stays two
// captures). Files that cannot be read are named on Stderr, counted in
// Result.Failed and the summary's errors, and the rest read on.
type Files struct {
	Paths []string
	Stdin io.Reader // the capture "-" stands for
	// Progress, when set, reports reading progress per file; Done is
	// called after each file.
	Progress func(path string) sniffer.Progress
	Done     func()
	// Command names the command in warnings ("analyze").
	Command string
}

// Workers is one: a file is read in order.
func (f *Files) Workers() int { return 1 }

// Run reads every file.
func (f *Files) Run(ctx context.Context, p *Pipeline) error {
	cmd := f.Command
	if cmd == "" {
		cmd = "analyze"
	}
	w := p.workers[0]
	if p.res.FileErrors == nil {
		p.res.FileErrors = map[string]uint64{}
	}
	for _, path := range f.Paths {
		if ctx.Err() != nil {
			break
		}
		var prog sniffer.Progress
		if f.Progress != nil {
			prog = f.Progress(path)
		}
		var st sniffer.FileStats
		var err error
		w.With(func(sn *sniffer.Sniffer) {
			if path == "-" && f.Stdin != nil {
				st, err = sniffer.ReadFrom("stdin", f.Stdin, sn, prog)
			} else {
				st, err = sniffer.ReadFile(path, sn, prog)
			}
		})
		if m := p.merge; m != nil {
			m.Reset()
		}
		if f.Done != nil {
			f.Done()
		}
		fi := report.FileInfo{Path: path, Format: st.Format, Packets: st.Packets, First: st.First, Last: st.Last}
		switch {
		case err != nil:
			fmt.Fprintf(p.stderr, "pqwatch %s: %v\n", cmd, err)
			fi.Error = err.Error()
			p.res.Failed++
			p.res.FileErrors["unreadable_file"]++
		case st.Err != nil:
			fmt.Fprintf(p.stderr, "pqwatch %s: warning: %v\n", cmd, st.Err)
			fi.Error = st.Err.Error()
			p.res.FileErrors[fileErrReason(st.Err)]++
		}
		p.res.Files = append(p.res.Files, fi)
	}
	return nil
}

// Rings is the live source: a capture's AF_PACKET rings, one worker per
// fanout member. BatchEnd, when set, runs on a worker's goroutine after
// each batch, its lock released (the daemon's housekeeping rides on it).
type Rings struct {
	Capture  *capture.Capture
	BatchEnd func(worker int)
}

// Workers is the capture's fanout members.
func (r *Rings) Workers() int { return r.Capture.Workers() }

// Run captures until ctx ends (and the rings' drain after it).
func (r *Rings) Run(ctx context.Context, p *Pipeline) error {
	ws := p.workers
	return r.Capture.RunBatches(ctx, func(i, ifindex int, ts time.Time, link int, data []byte) {
		ws[i].Packet(ts, link, ifindex, data)
	}, func(i int) {
		ws[i].BatchEnd()
		if r.BatchEnd != nil {
			r.BatchEnd(i)
		}
	})
}
