package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/pqwatch/pqwatch/exporter"
	"github.com/pqwatch/pqwatch/merge"
	"github.com/pqwatch/pqwatch/pipeline"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/report"
	"github.com/pqwatch/pqwatch/sniffer"
)

func cmdInventory(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("inventory", "usage: pqwatch inventory [flags] [FILE...]\n\nInventory the TLS endpoints seen in handshake records (JSONL, plain or gzip; - reads stdin; or -kafka-brokers) or in captures (pcap/pcapng, as analyze reads them): a summary for people, or a CycloneDX 1.7 cryptographic bill of materials.", stderr)
	var (
		format   string
		out      string
		maxEnds  int
		maxFlows int
		pk       planKafkaFlags
	)
	fs.StringVar(&format, "format", "text", "output `format`: text (the endpoints still classical, ranked by handshakes) or cyclonedx (CycloneDX 1.7 JSON)")
	fs.StringVar(&out, "o", "-", "output `FILE` (- for stdout)")
	fs.IntVar(&maxEnds, "max-endpoints", report.MaxInventoryEndpoints, "cap on the endpoints kept; the handshakes of endpoints past it are counted, not listed")
	fs.IntVar(&maxFlows, "max-flows", 65536, "for capture files: cap on tracked TCP flows, as analyze's -max-flows")
	pk.register(fs)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	switch format {
	case "text", "cyclonedx":
	default:
		fmt.Fprintf(stderr, "pqwatch inventory: -format must be text or cyclonedx, not %q\n", format)
		return exitUsage
	}
	if maxEnds < 1 {
		fmt.Fprintf(stderr, "pqwatch inventory: -max-endpoints %d: must be at least 1\n", maxEnds)
		return exitUsage
	}
	feed, ok := pk.inputs("inventory", "record or capture files", fs, stderr)
	if !ok {
		return exitUsage
	}
	inv := report.NewInventory()
	inv.MaxEndpoints = maxEnds
	var lines inventoryLines
	add := func(line []byte) { lines.add(inv, line) }

	failed, sources := 0, fs.NArg()
	var captures []string
	stdin := io.Reader(os.Stdin)
	for _, path := range fs.Args() {
		if ctx.Err() != nil {
			break
		}
		kind, r, err := sniffInput(path, stdin)
		if path == "-" && r != nil {
			stdin = r // what was peeked at is not lost
		}
		switch {
		case err != nil:
			fmt.Fprintf(stderr, "pqwatch inventory: %s: %v\n", path, err)
			failed++
		case kind == inputCapture:
			captures = append(captures, path)
		default:
			if err := scanJSONLines(r, add); err != nil {
				fmt.Fprintf(stderr, "pqwatch inventory: %s: %v\n", path, err)
				failed++
			}
			if c, ok := r.(io.Closer); ok && path != "-" {
				c.Close()
			}
		}
	}
	if len(captures) > 0 && ctx.Err() == nil {
		res, err := runOffline(ctx, pipeline.Config{
			Source:  &pipeline.Files{Paths: captures, Stdin: stdin, Command: "inventory"},
			Sniffer: sniffer.Config{MaxFlows: maxFlows}, Merge: &merge.Config{Offline: true},
			Sinks: []record.Sink{inv}, Stderr: stderr,
		}, nil)
		if err != nil {
			fmt.Fprintln(stderr, "pqwatch inventory:", err)
			return exitFailure
		}
		failed += res.Failed
	}
	if pk.enabled() {
		sources++
		if ctx.Err() == nil {
			if err := readFeed(ctx, "inventory", feed, func(_ int, v []byte) { add(v) }, stderr); err != nil {
				fmt.Fprintln(stderr, "pqwatch inventory:", err)
				failed++
			}
		}
	}
	if failed == sources {
		return exitFailure
	}
	w, closeOut, err := openOut(out, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "pqwatch inventory:", err)
		return exitFailure
	}
	bw := bufio.NewWriter(w)
	if format == "cyclonedx" {
		var b []byte
		if b, err = inv.BOM(version()); err == nil {
			_, err = bw.Write(b)
		}
	} else {
		err = inv.WriteText(bw)
	}
	if err == nil {
		err = bw.Flush()
	}
	if cerr := closeOut(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintln(stderr, "pqwatch inventory:", err)
		return exitFailure
	}
	if lines.rollups > 0 {
		fmt.Fprintf(stderr, "pqwatch inventory: %d rollup rows skipped: the inventory reads handshake records (rollups carry no cipher suites or offered groups)\n", lines.rollups)
	}
	if lines.malformed > 0 {
		fmt.Fprintf(stderr, "pqwatch inventory: %d lines were not records (skipped)\n", lines.malformed)
	}
	if inv.OverflowHandshakes > 0 {
		fmt.Fprintf(stderr, "pqwatch inventory: warning: %d handshakes of endpoints past -max-endpoints %d are counted, not listed\n", inv.OverflowHandshakes, maxEnds)
	}
	if inv.IDsUnchecked > 0 {
		fmt.Fprintf(stderr, "pqwatch inventory: warning: %d records past the %d-id cap were not checked for duplicates\n", inv.IDsUnchecked, report.MaxInventoryIDs)
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "pqwatch inventory: interrupted: the inventory covers what was read")
		return exitFailure
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "pqwatch inventory: incomplete: %d of %d sources could not be read (named above); the inventory covers the rest\n", failed, sources)
		return exitFailure
	}
	if inv.Records == 0 {
		fmt.Fprintf(stderr, "pqwatch inventory: %s: no handshake records; inventory reads the JSONL records of run or analyze -format jsonl (or ecs-jsonl), run's Kafka records, or captures\n", strings.Join(fs.Args(), ", "))
		return exitFailure
	}
	return exitOK
}

// inventoryLines tells the lines of record input apart.
type inventoryLines struct{ malformed, rollups int }

func (l *inventoryLines) add(inv *report.Inventory, line []byte) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return
	}
	if exporter.IsECS(line) { // -format ecs-jsonl, -kafka-format ecs
		if h, err := exporter.ParseECS(line); err == nil {
			inv.Add(h)
		} else {
			l.malformed++
		}
		return
	}
	var r record.Handshake
	if err := json.Unmarshal(line, &r); err == nil && r.Outcome != "" {
		inv.Add(&r)
		return
	}
	var row report.RollupRow
	if err := json.Unmarshal(line, &row); err == nil && row.Server != "" && !row.Start.IsZero() {
		l.rollups++
		return
	}
	l.malformed++
}

type inputKind int

const (
	inputRecords inputKind = iota
	inputCapture
)

// sniffInput says whether path (- : stdin) holds a capture (pcap or
// pcapng, plain or gzip) or records. For records it returns the open
// reader (the caller closes a file); for stdin it returns the buffered
// reader that must replace stdin.
func sniffInput(path string, stdin io.Reader) (inputKind, io.Reader, error) {
	var r io.Reader = stdin
	var f *os.File
	if path != "-" {
		var err error
		if f, err = os.Open(path); err != nil {
			return 0, nil, err
		}
		r = f
	}
	br := bufio.NewReaderSize(r, 64<<10)
	head, _ := br.Peek(4)
	if len(head) >= 2 && head[0] == 0x1f && head[1] == 0x8b {
		// Peek into the gzip stream: a second reader over a copy of what
		// is buffered.
		buf, _ := br.Peek(br.Buffered())
		if gz, err := gzip.NewReader(bytes.NewReader(buf)); err == nil {
			inner := make([]byte, 4)
			n, _ := io.ReadFull(gz, inner)
			head = inner[:n]
		}
	}
	if isCaptureMagic(head) {
		if f != nil {
			f.Close()
		}
		return inputCapture, br, nil
	}
	if f != nil {
		return inputRecords, readCloser{br, f}, nil
	}
	return inputRecords, br, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// isCaptureMagic: pcap (either byte order, micro- or nanosecond) or pcapng.
func isCaptureMagic(b []byte) bool {
	if len(b) < 4 {
		return false
	}
	switch string(b[:4]) {
	case "\xd4\xc3\xb2\xa1", "\xa1\xb2\xc3\xd4", "\x4d\x3c\xb2\xa1", "\xa1\xb2\x3c\x4d", "\x0a\x0d\x0d\x0a":
		return true
	}
	return false
}
