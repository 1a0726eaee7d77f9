package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/klauspost/compress/gzip"

	"github.com/pqwatch/pqwatch/report"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// maxPlanLine bounds one JSONL line of plan's input.
const maxPlanLine = 4 << 20

func cmdPlan(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("plan", "usage: pqwatch plan [flags] [FILE...]\n\nRead handshake records or rollup rows (JSONL, plain or gzip; - reads stdin; or -kafka-brokers) from many nodes and plan what a server policy costs: per node, per server, top SNIs.", stderr)
	var (
		cf     commonFlags // only -forecast-groups and -expect-policy are registered
		costs  listFlag
		format string
		out    string
		pk     planKafkaFlags
	)
	fs.StringVar(&cf.forecast, "forecast-groups", "", "server `groups` in preference order for the plan, as in analyze (default: OpenSSL 3.5's default policy)")
	fs.Var(&costs, "costs", "loadgen results.json as `[SERVERS=]FILE`: server CPU per handshake by group; SERVERS (address:port, comma-separated) limits it to those servers, else it applies to every server (repeatable)")
	registerExpect(fs, &cf.expect)
	fs.StringVar(&format, "format", "text", "output `format`: text, json or csv")
	fs.StringVar(&out, "o", "-", "output `FILE` (- for stdout)")
	pk.register(fs)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	switch format {
	case "text", "json", "csv":
	default:
		fmt.Fprintf(stderr, "pqwatch plan: -format must be text, json or csv, not %q\n", format)
		return exitUsage
	}
	feed, ok := pk.inputs("plan", "record files", fs, stderr)
	if !ok {
		return exitUsage
	}
	policy, err := cf.policy()
	if err != nil {
		fmt.Fprintln(stderr, "pqwatch plan:", err)
		return exitUsage
	}
	var pc []report.PlanCosts
	for _, c := range costs {
		p, err := loadCosts(c)
		if err != nil {
			fmt.Fprintln(stderr, "pqwatch plan: -costs:", err)
			return exitUsage
		}
		pc = append(pc, p)
	}
	es, err := expectations(cf.expect)
	if err != nil {
		fmt.Fprintln(stderr, "pqwatch plan:", err)
		return exitUsage
	}
	plan := report.NewPlan(policy, pc)
	plan.PolicyCheck = policyCheck(es)
	kinds := planKinds{reference: planReferenceDecoder}
	failed, sources, read := 0, fs.NArg(), 0
	for _, path := range fs.Args() {
		if ctx.Err() != nil {
			break
		}
		read++
		if err := readPlanRecords(path, os.Stdin, plan, &kinds); err != nil {
			fmt.Fprintf(stderr, "pqwatch plan: %s: %v\n", path, err)
			failed++
		}
	}
	if pk.enabled() && ctx.Err() == nil {
		read++
	}
	if pk.enabled() {
		sources++
		if err := readPlanKafka(ctx, feed, plan, &kinds, stderr); err != nil {
			fmt.Fprintln(stderr, "pqwatch plan:", err)
			failed++
		}
	}
	if failed == sources {
		return exitFailure
	}
	if err := kinds.mixed(); err != nil {
		fmt.Fprintln(stderr, "pqwatch plan:", err)
		return exitFailure
	}
	plan.Finish()
	w, closeOut, err := openOut(out, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "pqwatch plan:", err)
		return exitFailure
	}
	bw := bufio.NewWriter(w)
	switch format {
	case "json":
		enc := json.NewEncoder(bw)
		enc.SetIndent("", "  ")
		err = enc.Encode(plan)
	case "csv":
		cw := csv.NewWriter(bw)
		cw.Write(report.PlanCSVHeader)
		cw.WriteAll(plan.CSVRows())
		err = cw.Error()
	default:
		err = plan.WriteText(bw)
	}
	if err == nil {
		err = bw.Flush()
	}
	if cerr := closeOut(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintln(stderr, "pqwatch plan:", err)
		return exitFailure
	}
	warnPolicyUncovered(stderr, "plan", plan.PolicyCheck)
	if plan.Malformed > 0 {
		fmt.Fprintf(stderr, "pqwatch plan: %d lines were not records (skipped)\n", plan.Malformed)
	}
	if ctx.Err() != nil {
		fmt.Fprintf(stderr, "pqwatch plan: interrupted: the plan covers what was read of %d of %d sources\n", read, sources)
		return exitFailure
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "pqwatch plan: incomplete: %d of %d sources could not be read (named above); the plan covers the rest\n", failed, sources)
		return exitFailure
	}
	if plan.Handshakes == 0 {
		names := fs.Args()
		if pk.enabled() {
			names = append(names, "kafka topic "+feed.Topic)
		}
		fmt.Fprintf(stderr, "pqwatch plan: %s: no handshake records; plan reads the JSONL records of pqwatch run -format jsonl or analyze -format jsonl, run's Kafka records or its rollups\n", strings.Join(names, ", "))
		return exitFailure
	}
	if st := plan.Rollups; st != nil && st.Unplanned > 0 {
		fmt.Fprintf(stderr, "pqwatch plan: warning: %d handshakes of %d rollup rows without offer classes (an older agent) are not in the plan\n", st.Unplanned, st.WithoutClasses)
	}
	if plan.IDsUnchecked > 0 {
		fmt.Fprintf(stderr, "pqwatch plan: warning: %d records past the %d-id cap were not checked for duplicates\n", plan.IDsUnchecked, report.MaxPlanIDs)
	}
	return exitOK
}

// planReferenceDecoder makes plan read records with encoding/json only:
// the reference its benchmarks measure the PlanDecoder against (set by
// the tests).
var planReferenceDecoder bool

// readPlanRecords adds every record or rollup row of the JSONL file path
// (- : stdin; gzip when it starts with gzip's magic) to plan; a line that is
// neither is counted in plan.Malformed.
func readPlanRecords(path string, stdin io.Reader, plan *report.Plan, kinds *planKinds) error {
	return readJSONLines(path, stdin, func(line []byte) { kinds.add(plan, line) })
}

// readJSONLines calls fn with every line of the JSONL file path (- :
// stdin; gzip when it starts with gzip's magic): plan's and inventory's
// reader.
func readJSONLines(path string, stdin io.Reader, fn func(line []byte)) error {
	var r io.Reader = stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	return scanJSONLines(r, fn)
}

// readPlanInput adds every line of r to plan (scanJSONLines).
func readPlanInput(r io.Reader, plan *report.Plan, kinds *planKinds) error {
	return scanJSONLines(r, func(line []byte) { kinds.add(plan, line) })
}

// scanJSONLines is readJSONLines over an open reader.
func scanJSONLines(r io.Reader, fn func(line []byte)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return err
		}
		defer gz.Close()
		// Decompressed on a goroutine of its own, beside the parsing;
		// klauspost/compress's gzip: 1.5 to 2 times compress/gzip's rate
		// (BenchmarkPlanGunzip).
		pr, pw := io.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			bw := bufio.NewWriterSize(pw, 256<<10)
			_, err := io.Copy(bw, gz)
			if err == nil {
				err = bw.Flush()
			}
			pw.CloseWithError(err)
		}()
		defer func() {
			pr.CloseWithError(errors.New("input abandoned")) // the copy stops
			<-done
		}()
		r = pr
	} else {
		r = br
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), maxPlanLine) // reads of 64 KiB or more bypass br's buffer (one copy less)
	for sc.Scan() {
		fn(sc.Bytes())
	}
	return sc.Err()
}

// loadgenResults is the part of loadgen's results.json that plan reads.
type loadgenResults struct {
	Summary []struct {
		Arm                     string  `json:"arm"`
		Rate                    float64 `json:"rate"`
		ValidTrials             int     `json:"valid_trials"`
		Measures                string  `json:"measures"`
		ServerCPUUsPerHandshake *struct {
			N    int     `json:"n"`
			Mean float64 `json:"mean"`
			Min  float64 `json:"min"`
			Max  float64 `json:"max"`
		} `json:"server_cpu_us_per_handshake"`
	} `json:"summary"`
}

// loadCosts reads -costs [SERVERS=]FILE. Each summary row with a measured
// server CPU gives its group's cost; several rows for one group (several
// rates) are pooled: the mean weighted by trials, the smallest min and the
// largest max.
func loadCosts(spec string) (report.PlanCosts, error) {
	var pc report.PlanCosts
	path := spec
	if servers, file, ok := strings.Cut(spec, "="); ok && strings.Contains(servers, ":") && !strings.Contains(servers, "/") {
		path = file
		for _, s := range strings.Split(servers, ",") {
			if s = strings.TrimSpace(s); s != "" {
				pc.Servers = append(pc.Servers, s)
			}
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return pc, err
	}
	var res loadgenResults
	if err := json.Unmarshal(b, &res); err != nil {
		return pc, fmt.Errorf("%s: %w", path, err)
	}
	groups := map[string]report.GroupCost{}
	for _, s := range res.Summary {
		c := s.ServerCPUUsPerHandshake
		if c == nil || c.N == 0 || s.Measures == "" {
			continue
		}
		g, ok := tlsparse.ParseGroup(s.Measures)
		if !ok {
			return pc, fmt.Errorf("%s: arm %s measures unknown group %q", path, s.Arm, s.Measures)
		}
		name := g.String()
		old, seen := groups[name]
		if !seen {
			groups[name] = report.GroupCost{Mean: c.Mean, Min: c.Min, Max: c.Max, Trials: c.N}
			continue
		}
		n := old.Trials + c.N
		groups[name] = report.GroupCost{
			Mean: (old.Mean*float64(old.Trials) + c.Mean*float64(c.N)) / float64(n),
			Min:  min(old.Min, c.Min), Max: max(old.Max, c.Max), Trials: n,
		}
	}
	if len(groups) == 0 {
		return pc, errors.New(path + ": no arm with a measured server CPU per handshake")
	}
	pc.Table, err = report.NewCostTable(path, groups)
	return pc, err
}
