// Package pipeline is the one path a handshake record takes, shared by
// `analyze`, `run` and `demo`, each wiring it differently:
//
//	source (capture files, or the live agent's AF_PACKET rings)
//	  -> sniffer (packets -> records)
//	  -> one handshake once (package merge, Config.Merge): the views of one
//	     handshake (before and after a node's NAT, on the uplink, the
//	     bridge and a pod's veth) become one record; each record waits
//	     there briefly for its twins and leaves in arrival order
//	  -> taps: sinks that need only what the wire said (the metrics), run
//	     on the goroutine that released the record, so that they count
//	     each handshake once
//	  -> stages, in order, each handing the record on when it is done with
//	     it (attribution to a server generation, the access-log join, the
//	     agent's join check, ...)
//	  -> sinks (the summary, JSONL, Kafka)
//
// Records flow one way: no stage or sink calls back up. A stage may hold
// records (the merge waits for twins, the log join for lines) and hands on
// what it holds when flushed. Close flushes the merge, then the stages,
// then the sinks.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/pqwatch/pqwatch/merge"
	"github.com/pqwatch/pqwatch/record"
)

// Stage is one enrichment step between the sniffer and the sinks. Process
// takes a record and hands it to the next step, at once or later and from
// another goroutine; Flush hands on everything the stage still holds, once
// no more records will come.
type Stage interface {
	Process(r *record.Handshake)
	Flush()
}

// NewStage builds a stage that hands its records to next.
type NewStage func(next func(*record.Handshake)) Stage

// Config is the shape of a pipeline.
type Config struct {
	// Merge, when set, is the first stage, before the taps: one record
	// per handshake however many views of it the capture saw. Its Done
	// defaults to the pipeline's (records merged away go there).
	Merge  *merge.Config
	Taps   []record.Sink
	Stages []NewStage
	Sinks  []record.Sink
	Logger *slog.Logger // sink failures; nil: discarded
	// Done, when set, receives each record once every sink has had it:
	// the record is no one's then (sinks copy what they keep), and Done
	// may reuse its memory.
	Done func(*record.Handshake)
}

// Pipeline carries records from a sniffer to its sinks.
type Pipeline struct {
	merge  *merge.Merger
	taps   []record.Sink
	stages []Stage
	head   func(*record.Handshake)
	sinks  []*sink
	log    *slog.Logger
	done   func(*record.Handshake)
	out    atomic.Uint64
}

// sink is a record sink and whether it has failed (said once).
type sink struct {
	record.Sink
	failed atomic.Bool
}

// New builds a pipeline; the stages are built last to first, each handed
// the one after it.
func New(cfg Config) *Pipeline {
	p := &Pipeline{taps: cfg.Taps, log: cfg.Logger, done: cfg.Done}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	for _, s := range cfg.Sinks {
		p.sinks = append(p.sinks, &sink{Sink: s})
	}
	next := p.deliver
	p.stages = make([]Stage, len(cfg.Stages))
	for i := len(cfg.Stages) - 1; i >= 0; i-- {
		st := cfg.Stages[i](next)
		p.stages[i] = st
		next = st.Process
	}
	p.head = next
	if cfg.Merge != nil {
		mc := *cfg.Merge
		if mc.Done == nil {
			mc.Done = cfg.Done
		}
		p.merge = merge.New(mc, p.tapped)
	}
	return p
}

// Record takes one record from the sniffer (its OnRecord).
func (p *Pipeline) Record(r *record.Handshake) {
	if p.merge != nil {
		p.merge.Process(r)
		return
	}
	p.tapped(r)
}

// tapped hands a record to the taps, then to the stages.
func (p *Pipeline) tapped(r *record.Handshake) {
	for _, t := range p.taps {
		_ = t.Write(r) // taps count; they do not fail
	}
	p.head(r)
}

// Merge is the merge stage, nil without Config.Merge.
func (p *Pipeline) Merge() *merge.Merger { return p.merge }

// deliver hands a finished record to every sink. A sink's first failure is
// logged; the sink counts the rest itself (Kafka) or writes nothing after
// it (JSONL keeps its first error).
func (p *Pipeline) deliver(r *record.Handshake) {
	p.out.Add(1)
	for _, s := range p.sinks {
		if err := s.Write(r); err != nil && s.failed.CompareAndSwap(false, true) {
			p.log.Error("record sink failed (logged once per sink)", "sink", fmt.Sprintf("%T", s.Sink), "err", err)
		}
	}
	if p.done != nil {
		p.done(r)
	}
}

// Delivered is the number of records handed to the sinks.
func (p *Pipeline) Delivered() uint64 { return p.out.Load() }

// Flush hands on every record the stages hold, first stage first (what it
// releases may wait in a later one): the merge, then the stages.
func (p *Pipeline) Flush() {
	if p.merge != nil {
		p.merge.Flush()
	}
	for _, st := range p.stages {
		st.Flush()
	}
}

// Close flushes the stages, then flushes and closes the sinks (in order,
// within ctx for those that wait on a network), and returns their errors.
func (p *Pipeline) Close(ctx context.Context) error {
	p.Flush()
	var errs []error
	for _, s := range p.sinks {
		if f, ok := s.Sink.(interface{ Flush() error }); ok {
			if err := f.Flush(); err != nil {
				errs = append(errs, err)
			}
		}
		if c, ok := s.Sink.(interface{ Close(context.Context) error }); ok {
			if err := c.Close(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
