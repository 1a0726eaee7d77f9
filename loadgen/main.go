package loadgen

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"
)

// listFlag collects repeated and comma-separated values.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// secondsFlag accepts a Go duration ("2s", "500ms") or plain seconds ("2", "0.5").
type secondsFlag struct{ d *time.Duration }

func (s secondsFlag) String() string {
	if s.d == nil {
		return ""
	}
	return s.d.String()
}

func (s secondsFlag) Set(v string) error {
	d, err := parseSeconds(v)
	if err != nil {
		return err
	}
	*s.d = d
	return nil
}

func parseSeconds(v string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%w: bad duration %q", ErrUsage, v)
	}
	return d, nil
}

// Main is `pqwatch loadgen`: it parses args (without the command name),
// runs, writes results and prints the summary table. Exit codes: 0 success,
// 1 runtime failure (including a FAILED scenario or request errors with
// -fail-on-errors), 2 usage error.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	if c, ok := stderr.(interface{ CatchFlagSet(*flag.FlagSet, string) }); ok {
		c.CatchFlagSet(fs, synopsis) // pqwatch help flags
	}
	fs.SetOutput(stderr)
	var (
		c                          Config
		arms, serverPIDs, names    listFlag
		rate                       float64
		rates, ca, arrival, scen   string
		scenAt, h2loadPath, outDir string
		seed                       int64
		verbose, failOnErrors      bool
		serverSocket               bool
	)
	c.Duration, c.Warmup, c.Timeout = 10*time.Second, 2*time.Second, 10*time.Second
	fs.StringVar(&c.Target, "target", "", "server `host:port` (required)")
	fs.StringVar(&c.SNI, "sni", "", "TLS server_name and Host header (default: the target host)")
	fs.StringVar(&c.Path, "path", "/", "request path")
	fs.BoolVar(&c.Insecure, "insecure", false, "do not verify the server certificate")
	fs.StringVar(&ca, "ca", "", "PEM `file` of CA certificates to trust (default: system roots)")
	fs.Var(&arms, "arm", "arm as `name=group[,group...][;resume=SHARE]` (repeatable; IANA names, e.g. hybrid=X25519MLKEM768,x25519; resume=0.5 resumes half its handshakes); default classical=x25519 and hybrid=X25519MLKEM768,x25519")
	fs.StringVar(&c.Baseline, "baseline", "", "arm the cost ratio divides by (default: the first arm)")
	fs.Float64Var(&rate, "rate", 0, "new handshakes per second (one step)")
	fs.StringVar(&rates, "rates", "", "rate ladder, e.g. 500,1000,2000")
	fs.Var(secondsFlag{&c.Duration}, "duration", "measured time per trial (e.g. 10s or 10)")
	fs.Var(secondsFlag{&c.Warmup}, "warmup", "load before each trial's measured window, excluded from statistics")
	fs.Var(secondsFlag{&c.Cooldown}, "cooldown", "pause between trials")
	fs.IntVar(&c.Trials, "trials", 3, "trials per arm and rate (run in shuffled order)")
	fs.StringVar(&arrival, "arrival", "constant", "arrival process: constant or poisson")
	fs.Int64Var(&seed, "seed", 1, "seed for the trial order and Poisson gaps")
	fs.Var(secondsFlag{&c.Timeout}, "timeout", "per-request timeout")
	fs.IntVar(&c.MaxInFlight, "max-inflight", 4096, "open requests at most (sends beyond it are late, and latency shows it)")
	fs.Var(&serverPIDs, "server-pid", "also measure server process `pid` (repeatable or comma-separated; descendants included)")
	fs.Var(&names, "server-name", "measure only the socket owners with this `comm` (repeatable or comma-separated), e.g. nginx; with no owner found here, every process of that name")
	fs.BoolVar(&serverSocket, "server-socket", true, "measure the processes that own the target's listening socket (and their descendants)")
	fs.Var(secondsFlag{&c.MaxSendLag}, "max-send-lag", "a trial whose p99 send lag exceeds this is invalid (default 10ms)")
	fs.Float64Var(&c.MaxShortfall, "max-shortfall", 0.01, "a trial whose completed requests fall short of those scheduled by more than this share is invalid")
	fs.Float64Var(&c.MaxErrorRate, "max-error-rate", 0.001, "a trial whose share of failed requests (timeouts included) exceeds this is invalid")
	fs.BoolVar(&c.MaxRateSearch, "max-rate-search", false, "after the ladder, search each arm for the highest rate whose trial is valid with p99 under -search-p99 (doubling, then bisecting)")
	fs.Var(secondsFlag{&c.Search.MaxP99}, "search-p99", "the p99 latency a max-rate search trial must stay under (default 100ms)")
	fs.IntVar(&c.IdleSessions, "idle-sessions", 0, "hold `N` idle TLS sessions (handshake done, no request) open during each trial, and report the server's memory per idle session")
	fs.StringVar(&scen, "scenario", "", "nginx scenario under load: swap, reload or rollback (needs -server-pid of the master)")
	fs.StringVar(&scenAt, "scenario-at", "", "step times from trial start, comma-separated (default: spread over the window)")
	fs.StringVar(&outDir, "out", "", "output `dir` for results.json, CSVs, SVG charts and summary.md")
	fs.StringVar(&h2loadPath, "h2load", "", "path to h2load: also measure its client CPU per handshake on the same target and report the ratio")
	fs.BoolVar(&verbose, "v", false, "log each trial to stderr")
	fs.BoolVar(&failOnErrors, "fail-on-errors", false, "exit 1 when any measured request failed")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stderr, mainHelp)
			return 0
		}
		return 2
	}
	usage := func(err error) int {
		fmt.Fprintf(stderr, "loadgen: %v\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		return usage(fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	if len(arms) == 0 {
		arms = listFlag{"classical=x25519", "hybrid=X25519MLKEM768,x25519"}
	}
	for _, a := range arms {
		arm, err := ParseArm(a)
		if err != nil {
			return usage(err)
		}
		c.Arms = append(c.Arms, arm)
	}
	if rate > 0 {
		c.Rates = append(c.Rates, rate)
	}
	for _, r := range splitList(rates) {
		v, err := strconv.ParseFloat(r, 64)
		if err != nil {
			return usage(fmt.Errorf("bad rate %q", r))
		}
		c.Rates = append(c.Rates, v)
	}
	if len(c.Rates) == 0 {
		c.Rates = []float64{100}
	}
	var err error
	if c.Arrival, err = ParseArrival(arrival); err != nil {
		return usage(err)
	}
	c.Seed = uint64(seed)
	for _, p := range splitList(serverPIDs.String()) {
		pid, err := strconv.Atoi(p)
		if err != nil || pid <= 0 {
			return usage(fmt.Errorf("bad -server-pid %q", p))
		}
		c.ServerPIDs = append(c.ServerPIDs, pid)
	}
	c.ServerNames = splitList(names.String())
	c.NoServerSocket = !serverSocket
	if c.Scenario.Kind, err = ParseScenario(scen); err != nil {
		return usage(err)
	}
	for _, s := range splitList(scenAt) {
		d, err := parseSeconds(s)
		if err != nil {
			return usage(err)
		}
		c.Scenario.At = append(c.Scenario.At, d)
	}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return usage(err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return usage(fmt.Errorf("no certificates in %s", ca))
		}
	}
	c.OutDir = outDir
	if verbose {
		c.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	}
	if err := c.Validate(); err != nil {
		return usage(err)
	}
	res, err := c.Run(ctx)
	if res != nil && h2loadPath != "" {
		cmp, herr := CompareH2Load(ctx, &c, res, h2loadPath)
		if herr != nil {
			fmt.Fprintf(stderr, "%v\n", herr)
		} else {
			res.H2Load = cmp
			if outDir != "" {
				if werr := writeResultsJSON(outDir, res); werr != nil {
					fmt.Fprintf(stderr, "loadgen: %v\n", werr)
				}
			}
		}
	}
	if res != nil {
		fmt.Fprint(stdout, SummaryMarkdown(res))
		for _, f := range res.Failures {
			fmt.Fprintf(stderr, "loadgen: %s\n", f)
		}
		for _, w := range res.Warnings {
			fmt.Fprintf(stderr, "loadgen: warning: %s\n", w)
		}
	}
	if err != nil {
		for _, msg := range strings.Split(err.Error(), "\n") { // errors.Join's lines
			if !strings.HasPrefix(msg, "loadgen: ") {
				msg = "loadgen: " + msg
			}
			fmt.Fprintln(stderr, msg)
		}
		return 1
	}
	if failOnErrors {
		for _, t := range res.Trials {
			if t.Errors > 0 {
				fmt.Fprintf(stderr, "loadgen: %d request errors in trial %d\n", t.Errors, t.ID)
				return 1
			}
		}
	}
	return 0
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// synopsis is the command line and purpose of pqwatch loadgen.
const synopsis = "usage: pqwatch loadgen [flags]\n\nA/B handshake load generator: new TLS connections at set rates for each arm (a set of key exchange groups), with the client's and the server's CPU per handshake."

const mainHelp = `
Every request is a new TCP connection, a full TLS 1.3 handshake (no
resumption unless the arm has ;resume=SHARE) and one HTTP/1.1 GET with
"Connection: close". A trial whose sender lagged, whose completed requests
fell short of its schedule or whose requests failed is invalid, shown and
left out of every figure drawn from the trials. Latency counts
from the intended send time of an open-loop schedule. crypto/tls offers an
arm's groups as a set in its own order (hybrids first), not in the order
given. Output with -out: results.json, requests.csv, trials.csv,
latency.svg, cpu.svg, rate.svg, summary.md.
`
