package pipeline

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/pqwatch/pqwatch/record"
)

// holdStage tags each record with its name and holds every second one
// until Flush, as a stage that waits for something (the log join) does.
type holdStage struct {
	name string
	next func(*record.Handshake)
	held []*record.Handshake
	n    int
}

func (s *holdStage) Process(r *record.Handshake) {
	r.SNI += s.name
	if s.n++; s.n%2 == 0 {
		s.held = append(s.held, r)
		return
	}
	s.next(r)
}

func (s *holdStage) Flush() {
	for _, r := range s.held {
		s.next(r)
	}
	s.held = nil
}

type failSink struct{ calls int }

func (f *failSink) Write(*record.Handshake) error { f.calls++; return errors.New("disk full") }

type closeSink struct {
	got            []string
	flushed, close int
}

func (c *closeSink) Write(r *record.Handshake) error { c.got = append(c.got, r.SNI); return nil }
func (c *closeSink) Flush() error                    { c.flushed++; return nil }
func (c *closeSink) Close(context.Context) error     { c.close++; return nil }

func TestPipelineOrder(t *testing.T) {
	var tapped int
	var logs bytes.Buffer
	fail, sink := &failSink{}, &closeSink{}
	stage := func(name string) NewStage {
		return func(next func(*record.Handshake)) Stage { return &holdStage{name: name, next: next} }
	}
	p := New(Config{
		Taps: []record.Sink{record.SinkFunc(func(r *record.Handshake) { tapped++; r.SNI = "r" })},
		// The order is the pipeline's: attribution, join, after the join.
		AfterJoin:   []NewStage{stage("c")},
		Join:        stage("b"),
		Attribution: stage("a"),
		Sinks:       []record.Sink{fail, sink},
		Logger:      slog.New(slog.NewTextHandler(&logs, nil)),
	})
	for range 4 {
		p.Record(&record.Handshake{})
	}
	// a passes records 1 and 3; b passes the first of those and holds 3;
	// c passes its first.
	if tapped != 4 || len(sink.got) != 1 {
		t.Fatalf("before flush: tapped %d, delivered %v", tapped, sink.got)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(sink.got) != 4 || p.Delivered() != 4 {
		t.Fatalf("after close: delivered %v (%d)", sink.got, p.Delivered())
	}
	for _, sni := range sink.got {
		if sni != "rabc" {
			t.Errorf("record went through %q, want taps, then a, b and c", sni)
		}
	}
	if sink.flushed != 1 || sink.close != 1 {
		t.Errorf("sink flushed %d, closed %d times", sink.flushed, sink.close)
	}
	if fail.calls != 4 || strings.Count(logs.String(), "record sink failed") != 1 {
		t.Errorf("failing sink: %d calls; log:\n%s", fail.calls, logs.String())
	}
}
