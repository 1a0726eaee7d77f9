package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/pqwatch/pqwatch/tlsparse"
)

// ErrH2Load marks a failed h2load comparison run.
var ErrH2Load = errors.New("loadgen: h2load")

// H2LoadComparison sets loadgen's own client CPU per handshake next to
// h2load's (nghttp2) on the same target, arm groups and rate.
type H2LoadComparison struct {
	Command              []string `json:"command"`
	Arm                  string   `json:"arm"`
	Rate                 float64  `json:"rate"`
	Requests             int      `json:"requests"`
	Succeeded            int      `json:"succeeded"`
	H2LoadCPUUs          int64    `json:"h2load_cpu_us"`
	H2LoadUsPerHandshake float64  `json:"h2load_cpu_us_per_handshake"`
	LoadgenUsPerHS       float64  `json:"loadgen_cpu_us_per_handshake"`
	// Ratio is loadgen's client CPU per handshake over h2load's.
	Ratio float64 `json:"ratio"`
	// Group is the group h2load (OpenSSL) says it negotiated ("Server
	// Temp Key"), by IANA name; LoadgenGroups what loadgen's requests of
	// the arm at that rate negotiated.
	Group         string         `json:"group,omitempty"`
	LoadgenGroups map[string]int `json:"loadgen_groups,omitempty"`
}

// opensslGroup is a group name as OpenSSL's -groups spells it (the
// registry's OpenSSLName); a name the registry does not know as it is.
func opensslGroup(name string) string {
	if g, ok := tlsparse.ParseGroup(name); ok {
		return g.OpenSSLName()
	}
	return name
}

var (
	h2Succeeded = regexp.MustCompile(`requests: (\d+) total, \d+ started, \d+ done, (\d+) succeeded`)
	h2TempKey   = regexp.MustCompile(`Server Temp Key: (?:ECDH )?([A-Za-z0-9_-]+)`)
)

// h2loadGroup returns the IANA name of the group h2load's output reports,
// or "" when it reports none it names.
func h2loadGroup(out string) string {
	m := h2TempKey.FindStringSubmatch(out)
	if m == nil {
		return ""
	}
	if g, ok := tlsparse.ParseGroup(m[1]); ok {
		return g.String()
	}
	return m[1]
}

// RunH2Load runs h2load for n one-request HTTP/1.1 connections created at
// rate per second and returns its CPU time (user+system, from wait4) and
// the number of succeeded requests.
func RunH2Load(ctx context.Context, h2loadPath, target, sni, path string, groups []string, rate float64, n int) (cpu time.Duration, succeeded int, argv []string, group string, err error) {
	n = max(1, n)
	if sni == "" {
		sni, _, _ = net.SplitHostPort(target)
	}
	_, port, err := net.SplitHostPort(target)
	if err != nil {
		return 0, 0, nil, "", fmt.Errorf("%w: %v", ErrH2Load, err)
	}
	if path == "" {
		path = "/"
	}
	var og []string
	for _, g := range groups {
		og = append(og, opensslGroup(g))
	}
	r := min(n, max(1, int(rate+0.5))) // h2load: -r must not exceed -c
	argv = []string{h2loadPath, "--h1", "-t", "1", "-n", strconv.Itoa(n), "-c", strconv.Itoa(n),
		"-r", strconv.Itoa(r), "--groups", strings.Join(og, ":"), "--connect-to", target,
		"https://" + net.JoinHostPort(sni, port) + path}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(float64(n)/float64(r)*float64(time.Second))+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, 0, argv, "", fmt.Errorf("%w: %v: %s", ErrH2Load, err, lastLines(string(out), 5))
	}
	m := h2Succeeded.FindStringSubmatch(string(out))
	if m == nil {
		return 0, 0, argv, "", fmt.Errorf("%w: no request summary in output: %s", ErrH2Load, lastLines(string(out), 5))
	}
	succeeded, _ = strconv.Atoi(m[2])
	ps := cmd.ProcessState
	return ps.UserTime() + ps.SystemTime(), succeeded, argv, h2loadGroup(string(out)), nil
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-n):], " | ")
}

// CompareH2Load runs h2load with the baseline arm's groups at the first
// rate for the same number of handshakes as one trial, and compares its CPU
// per handshake with the client CPU per handshake loadgen measured for that
// arm and rate in res.
func CompareH2Load(ctx context.Context, c *Config, res *Results, h2loadPath string) (*H2LoadComparison, error) {
	if len(c.Rates) == 0 || len(c.Arms) == 0 {
		return nil, fmt.Errorf("%w: nothing to compare", ErrH2Load)
	}
	rate := c.Rates[0]
	var arm Arm
	for _, a := range c.Arms {
		if a.Name == c.Baseline {
			arm = a
		}
	}
	var lg float64
	var groups map[string]int
	valid := false
	for _, s := range res.Summary {
		if s.Arm == arm.Name && s.Rate == rate {
			lg, groups, valid = s.ClientCPUUsPerHandshake.Mean, s.Groups, s.ValidTrials > 0
		}
	}
	if !valid {
		return nil, fmt.Errorf("%w: arm %s has no valid trial at %g/s: no client CPU per handshake to compare h2load's with", ErrH2Load, arm.Name, rate)
	}
	n := max(1, int(rate*c.Duration.Seconds()))
	cpu, ok, argv, group, err := RunH2Load(ctx, h2loadPath, c.Target, c.SNI, c.Path, arm.GroupNames(), rate, n)
	if err != nil {
		return nil, err
	}
	if ok == 0 {
		return nil, fmt.Errorf("%w: no request succeeded", ErrH2Load)
	}
	cmp := &H2LoadComparison{Command: argv, Arm: arm.Name, Rate: rate, Requests: n, Succeeded: ok,
		H2LoadCPUUs: cpu.Microseconds(), H2LoadUsPerHandshake: float64(cpu.Microseconds()) / float64(ok),
		LoadgenUsPerHS: lg, Group: group, LoadgenGroups: groups}
	if cmp.H2LoadUsPerHandshake > 0 {
		cmp.Ratio = lg / cmp.H2LoadUsPerHandshake
	}
	return cmp, nil
}

func writeResultsJSON(dir string, res *Results) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("%w: %v", ErrOutput, err)
	}
	if err := os.WriteFile(filepath.Join(dir, FileResults), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("%w: %v", ErrOutput, err)
	}
	if err := os.WriteFile(filepath.Join(dir, FileSummary), []byte(SummaryMarkdown(res)), 0o644); err != nil {
		return fmt.Errorf("%w: %v", ErrOutput, err)
	}
	return nil
}
