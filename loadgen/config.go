// Package loadgen is pqwatch's A/B handshake load generator: open-loop
// arrivals (constant or Poisson) of full TLS 1.3 handshakes, one new TCP
// connection and one HTTP/1.1 GET per request, for several arms that differ
// only in the key exchange groups they offer. Latency is measured from the
// intended send time, so a stalled server cannot hide behind coordinated
// omission. Server CPU per handshake comes from the scheduler's run time of
// every thread of the processes that own the target's listening socket (see
// ServerCPU), the client's own from getrusage. A trial whose sender lagged,
// whose completed count fell short of its schedule or whose requests failed
// is marked invalid and left out of ratios and ceilings. Optional nginx scenarios (binary swap, reload,
// rollback) send signals under load and verify each step from the process
// table. Results go to results.json, requests.csv, trials.csv, SVG charts
// and a Markdown summary.
package loadgen

import (
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Sentinel errors.
var (
	// ErrUsage marks an invalid configuration or flag.
	ErrUsage = errors.New("loadgen: usage")
	// ErrUnsupportedGroup marks a group name crypto/tls cannot offer.
	ErrUnsupportedGroup = errors.New("loadgen: unsupported group")
	// ErrProc marks a failure to read the process table.
	ErrProc = errors.New("loadgen: proc")
	// ErrScenarioFailed marks a scenario step that the process table did
	// not confirm. Run returns it (wrapped) together with its Results.
	ErrScenarioFailed = errors.New("loadgen: scenario FAILED")
	// ErrFailed marks a run in which no measured request of any arm
	// succeeded. Run returns it (wrapped) together with its Results.
	ErrFailed = errors.New("loadgen: every request failed")
	// ErrNoValidTrial marks a run in which some arm has no valid trial.
	// Run returns it (wrapped) together with its Results.
	ErrNoValidTrial = errors.New("loadgen: no valid trial")
	// ErrOutput marks a failure to write the output directory.
	ErrOutput = errors.New("loadgen: output")
)

// Config describes one load generator run. The zero value is not valid: set
// at least Target, Arms and Rates; Validate fills the other defaults.
type Config struct {
	Target   string         // host:port
	SNI      string         // server_name; default the Target host
	Path     string         // request path; default "/"
	Insecure bool           // skip certificate verification
	RootCAs  *x509.CertPool // trusted roots; nil means the system pool
	Arms     []Arm
	Baseline string // arm the cost ratio divides by; default the first arm

	Rates    []float64 // requests per second, one ladder step each
	Duration time.Duration
	Warmup   time.Duration // excluded from every statistic
	Cooldown time.Duration // pause between trials
	Trials   int
	Arrival  Arrival
	Seed     uint64 // shuffles the trial order and seeds Poisson gaps

	Timeout     time.Duration // per request
	MaxInFlight int           // open requests at most; when full, sends are late (and latency shows it)

	// The server whose CPU is measured: by default the processes that own
	// the target's listening socket (unless NoServerSocket). ServerPIDs
	// widen that set (with their descendants), ServerNames narrow it by
	// comm (or, when no owner is found here, select by name).
	ServerPIDs     []int
	ServerNames    []string
	NoServerSocket bool
	ProcRoot       string // default "/proc"
	SampleInterval time.Duration

	// A trial is invalid when the p99 of its send lag exceeds MaxSendLag
	// (default 10 ms), when the requests that completed OK in its window
	// fall short of those scheduled in it by more than MaxShortfall
	// (default 0.01), or when errors (timeouts included) exceed
	// MaxErrorRate of its requests (default 0.001). Negative disables.
	MaxSendLag   time.Duration
	MaxShortfall float64
	MaxErrorRate float64

	Scenario Scenario

	// MaxRateSearch, after the ladder, searches each arm for the highest
	// rate a trial passes at (valid, and p99 under Search.MaxP99).
	MaxRateSearch bool
	Search        Search

	// IdleSessions is how many TLS sessions (handshake done, no request)
	// each trial opens before it starts and holds open while its load
	// runs; the server's memory per idle session is reported.
	IdleSessions int

	OutDir       string // write results here when set
	KeepRequests bool   // keep every Request in Results.Requests
	Logger       *slog.Logger
}

// Validate checks c and fills defaults.
func (c *Config) Validate() error {
	if c.Target == "" {
		return fmt.Errorf("%w: -target is required", ErrUsage)
	}
	if len(c.Arms) == 0 {
		return fmt.Errorf("%w: at least one -arm", ErrUsage)
	}
	seen := map[string]bool{}
	for _, a := range c.Arms {
		if seen[a.Name] {
			return fmt.Errorf("%w: duplicate arm %q", ErrUsage, a.Name)
		}
		seen[a.Name] = true
		if len(a.Groups) == 0 {
			return fmt.Errorf("%w: arm %q has no groups", ErrUsage, a.Name)
		}
	}
	if c.Baseline == "" {
		c.Baseline = c.Arms[0].Name
	} else if !seen[c.Baseline] {
		return fmt.Errorf("%w: baseline arm %q not defined", ErrUsage, c.Baseline)
	}
	if len(c.Rates) == 0 {
		return fmt.Errorf("%w: at least one rate", ErrUsage)
	}
	for _, r := range c.Rates {
		if !(r > 0) || r > 1e6 {
			return fmt.Errorf("%w: rate %v out of range (0, 1e6]", ErrUsage, r)
		}
	}
	if c.Duration <= 0 {
		return fmt.Errorf("%w: duration must be > 0", ErrUsage)
	}
	if c.Warmup < 0 || c.Cooldown < 0 {
		return fmt.Errorf("%w: negative warmup or cooldown", ErrUsage)
	}
	if c.MaxRateSearch {
		c.Search.defaults(c)
	}
	if c.IdleSessions < 0 {
		return fmt.Errorf("%w: negative idle sessions", ErrUsage)
	}
	if c.Trials <= 0 {
		c.Trials = 1
	}
	if c.Arrival == "" {
		c.Arrival = ArrivalConstant
	}
	if _, err := ParseArrival(string(c.Arrival)); err != nil {
		return err
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 4096
	}
	if c.ProcRoot == "" {
		c.ProcRoot = "/proc"
	}
	if c.SampleInterval <= 0 {
		c.SampleInterval = 50 * time.Millisecond
	}
	if c.MaxSendLag == 0 {
		c.MaxSendLag = 10 * time.Millisecond
	}
	if c.MaxShortfall == 0 {
		c.MaxShortfall = 0.01
	}
	if c.MaxErrorRate == 0 {
		c.MaxErrorRate = 0.001
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c.Scenario.validate(c)
}
