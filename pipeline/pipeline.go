// Package pipeline is the one path a handshake record takes, shared by
// `analyze`, `run` and `demo`, which differ only in their source and sinks:
//
//	source (capture files or stdin: Files; the live agent's AF_PACKET
//	        rings: Rings), one sniffer per source worker
//	  -> ids: the node and a unique id stamped on each record (Config.IDs)
//	  -> one handshake once (package merge, Config.Merge): the views of one
//	     handshake (before and after a node's NAT, on the uplink, the
//	     bridge and a pod's veth) become one record; each record waits
//	     there briefly for its twins and leaves in arrival order
//	  -> taps: sinks that need only what the wire said (the metrics, the
//	     forecast's counters), run on the goroutine that released the
//	     record, so that they count each handshake once and at once
//	  -> attribution: the process and server generation that accepted the
//	     connection (package proctrack)
//	  -> the access-log join (package logjoin): live, lines from tailed logs;
//	     offline, whole files joined by batch (Config.Logs)
//	  -> after the join: what needs the joined line (the $pid correction
//	     of the attribution, the join's own check)
//	  -> sinks (the summary, JSONL, Kafka)
//	  -> done: with Config.Recycle the record's memory goes back to the
//	     sniffers
//
// Records flow one way: no stage or sink calls back up. A stage may hold
// records (the merge waits for twins, the log join for lines) and hands on
// what it holds when flushed. Run reads the source until it ends or its
// context does, then flushes the sniffers; Close flushes the merge, then
// the stages in order, then the sinks; Result then says what the run saw,
// and Result.Finish completes a summary with it (once, for every command).
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/pqwatch/pqwatch/logjoin"
	"github.com/pqwatch/pqwatch/merge"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/sniffer"
)

// Stage is one enrichment step between the taps and the sinks. Process
// takes a record and hands it to the next step, at once or later and from
// another goroutine; Flush hands on everything the stage still holds, once
// no more records will come.
type Stage interface {
	Process(r *record.Handshake)
	Flush()
}

// NewStage builds a stage that hands its records to next.
type NewStage func(next func(*record.Handshake)) Stage

// Config is the shape of a pipeline. Every stage is optional; the order is
// the pipeline's, not the caller's.
type Config struct {
	Source Source
	// Sniffer bounds each worker's sniffer; OnRecord and NewRecord are the
	// pipeline's.
	Sniffer sniffer.Config
	// IDs, when set, stamps each record with the node and an id unique
	// across nodes and restarts (the live agent's records).
	IDs *IDs
	// Merge, when set, is the first stage, before the taps: one record
	// per handshake however many views of it the capture saw.
	Merge *merge.Config
	Taps  []record.Sink
	// Attribution names the server process and generation
	// (proctrack.NewAttribution).
	Attribution NewStage
	// Join is the live log join (logjoin.New); Logs, the offline one: the
	// files joined by batch at Close (logjoin.NewBatchStage), whose result
	// is in Result.Log. One or the other.
	Join NewStage
	Logs logjoin.Files
	// AfterJoin are the steps that need the joined line, in order: the
	// $pid correction (proctrack.LogPID), the join's own check.
	AfterJoin []NewStage
	Sinks     []record.Sink
	// Recycle reuses a record's memory for a later TCP record once every
	// sink has had it, instead of leaving it to the collector: sinks must
	// then not keep the *record.Handshake past the call (copy it; what it
	// points to is never reused), as record.Sink asks.
	Recycle bool
	// Stderr receives the warnings that name an input (an unreadable file,
	// an access log that matches badly); nil: discarded.
	Stderr io.Writer
	Logger *slog.Logger // sink failures; nil: discarded
}

// Pipeline carries records from a source's packets to the sinks.
type Pipeline struct {
	src     Source
	workers []*Worker
	ids     *IDs
	merge   *merge.Merger
	taps    []record.Sink
	stages  []Stage
	head    func(*record.Handshake)
	sinks   []*sink
	batch   *logjoin.BatchStage
	log     *slog.Logger
	stderr  io.Writer
	done    func(*record.Handshake)
	out     atomic.Uint64
	closed  atomic.Bool
	res     Result
}

// sink is a record sink and whether it has failed (said once).
type sink struct {
	record.Sink
	failed atomic.Bool
}

// New builds a pipeline over cfg.Source (nil: records come only through
// Record); the stages are built last to first, each handed the one after
// it. Nothing runs until Run.
func New(cfg Config) *Pipeline {
	p := &Pipeline{src: cfg.Source, taps: cfg.Taps, log: cfg.Logger, stderr: cfg.Stderr, ids: cfg.IDs}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.stderr == nil {
		p.stderr = io.Discard
	}
	for _, s := range cfg.Sinks {
		p.sinks = append(p.sinks, &sink{Sink: s})
	}
	var newRecord func() *record.Handshake
	if cfg.Recycle {
		newRecord, p.done = recycler()
	}
	var order []NewStage
	if cfg.Attribution != nil {
		order = append(order, cfg.Attribution)
	}
	switch {
	case cfg.Join != nil:
		order = append(order, cfg.Join)
	case !cfg.Logs.Empty():
		order = append(order, func(next func(*record.Handshake)) Stage {
			p.batch = logjoin.NewBatchStage(cfg.Logs, next)
			return p.batch
		})
	}
	order = append(order, cfg.AfterJoin...)
	next := p.deliver
	p.stages = make([]Stage, len(order))
	for i := len(order) - 1; i >= 0; i-- {
		st := order[i](next)
		p.stages[i] = st
		next = st.Process
	}
	p.head = next
	if cfg.Merge != nil {
		mc := *cfg.Merge
		mc.Done = p.done // records merged away
		p.merge = merge.New(mc, p.tapped)
	}
	if p.src != nil {
		sc := cfg.Sniffer
		sc.OnRecord, sc.NewRecord = p.Record, newRecord
		for range max(p.src.Workers(), 1) {
			p.workers = append(p.workers, &Worker{sn: sniffer.New(sc)})
		}
	}
	return p
}

// recycler is a pool of records: the next handshake on the same P reuses
// one still in the caches, and the heap hardly grows between collections.
func recycler() (get func() *record.Handshake, put func(*record.Handshake)) {
	var pool sync.Pool
	get = func() *record.Handshake {
		if r, ok := pool.Get().(*record.Handshake); ok {
			return r
		}
		return new(record.Handshake)
	}
	put = func(r *record.Handshake) {
		// What it points to is the collector's again, but for the memory
		// of its hello's lists, which the sniffer fills in place next time
		// (the sinks copy what they keep).
		*r = record.Handshake{ALPN: r.ALPN[:0], OfferedGroups: r.OfferedGroups[:0], KeyShares: r.KeyShares[:0],
			OfferedIDs: r.OfferedIDs[:0], KeyShareIDs: r.KeyShareIDs[:0]}
		pool.Put(r)
	}
	return get, put
}

// Record takes one record from a sniffer: stamped, then merged, tapped and
// staged.
func (p *Pipeline) Record(r *record.Handshake) {
	if p.ids != nil {
		p.ids.stamp(r)
	}
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

// Workers are the sniffers, one per source worker.
func (p *Pipeline) Workers() []*Worker { return p.workers }

// deliver hands a finished record to every sink. A sink's first failure is
// logged; the sink counts the rest itself (Kafka, JSONL).
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

// Run reads the source until it ends or ctx does, then flushes the
// sniffers (their open flows become records); the stages keep what they
// hold until Close. It returns the source's error.
func (p *Pipeline) Run(ctx context.Context) error {
	if p.src == nil {
		return errors.New("pipeline: no source")
	}
	err := p.src.Run(ctx, p)
	for _, w := range p.workers {
		w.With(func(sn *sniffer.Sniffer) { sn.Flush() })
	}
	return err
}

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
// An offline join's result is then in Result, its warnings on Stderr.
func (p *Pipeline) Close(ctx context.Context) error {
	if !p.closed.CompareAndSwap(false, true) {
		return nil
	}
	p.Flush()
	if p.batch != nil {
		fr := p.batch.Result()
		warnLogs(p.stderr, fr)
		p.res.Log = &fr
	}
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

// SnifferStats sums the workers' sniffer counters.
func (p *Pipeline) SnifferStats() sniffer.Stats {
	sum := sniffer.Stats{Errors: map[string]uint64{}, QUIC: map[string]uint64{}}
	for _, w := range p.workers {
		st := w.Stats()
		sum.Packets += st.Packets
		sum.Bytes += st.Bytes
		sum.TCPPackets += st.TCPPackets
		sum.UDPPackets += st.UDPPackets
		sum.Filtered += st.Filtered
		sum.Flows += st.Flows
		sum.FlowsActive += st.FlowsActive
		sum.BufferedBytes += st.BufferedBytes
		sum.FlowsEvicted += st.FlowsEvicted
		sum.FlowsExpired += st.FlowsExpired
		sum.Records += st.Records
		for k, v := range st.Errors {
			sum.Errors[k] += v
		}
		for k, v := range st.QUIC {
			sum.QUIC[k] += v
		}
	}
	return sum
}

// Result is what the run saw: the sniffers' counters, the files read (a
// Files source) and the offline log join; the caller adds what only it
// knows (the live agent's log result and swap events) before Finish.
func (p *Pipeline) Result() Result {
	r := p.res
	r.Sniffer = p.SnifferStats()
	if p.merge != nil {
		r.Merge = p.merge.Stats()
	}
	r.Delivered = p.Delivered()
	return r
}
