package loadgen

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RequestHeader is the header every request carries to name itself:
// "t<trial id> s<seq> window" (or "warmup"), the trial's position in the
// run's order and the request's sequence number in the trial, as in
// results.json and requests.csv. Log it (nginx: $http_x_loadgen_request)
// to join the server's lines with loadgen's.
const RequestHeader = "X-Loadgen-Request"

// Request is the outcome of one request: one new TCP connection, one full
// TLS 1.3 handshake and one HTTP/1.1 GET.
type Request struct {
	Arm      string        `json:"arm"`
	Rate     float64       `json:"rate"`
	Trial    int           `json:"trial"`
	TrialID  int           `json:"trial_id"` // the trial's position in the run's order
	Seq      int           `json:"seq"`
	Warmup   bool          `json:"warmup"`
	Intended time.Time     `json:"intended"` // when the schedule said to send
	Start    time.Time     `json:"start"`    // when the dial actually began
	Latency  time.Duration `json:"latency"`  // end minus Intended (coordinated-omission correct)
	Service  time.Duration `json:"service"`  // end minus Start (what a closed-loop tool reports)
	Group    string        `json:"group,omitempty"`
	HRR      bool          `json:"hrr"`
	// ResumeAttempt is set when the request offered a session ticket (an
	// arm with a resume share); Resumed when the server accepted it.
	ResumeAttempt bool   `json:"resume_attempt,omitempty"`
	Resumed       bool   `json:"resumed,omitempty"`
	PID           int    `json:"pid,omitempty"` // the X-Pid response header
	Status        int    `json:"status,omitempty"`
	Err           string `json:"error,omitempty"` // error class, empty on success
	// ErrText is the error's own text (at most maxErrText bytes), for the
	// first failure of each reason that the results quote.
	ErrText string `json:"error_text,omitempty"`
}

// OK reports whether the request completed without error.
func (r *Request) OK() bool { return r.Err == "" }

// End is when the response was complete (or the request failed).
func (r *Request) End() time.Time { return r.Intended.Add(r.Latency) }

// requester issues requests for one arm.
type requester struct {
	target  string
	tlsConf *tls.Config
	// resumeConf offers the session tickets tlsConf stores; nil unless
	// the arm resumes a share of its handshakes.
	resumeConf *tls.Config
	req        []byte
	timeout    time.Duration
	dialer     net.Dialer
}

func newRequester(c *Config, arm Arm) *requester {
	host := c.SNI
	if host == "" {
		host, _, _ = net.SplitHostPort(c.Target)
	}
	tc := &tls.Config{
		ServerName:         host,
		MinVersion:         tls.VersionTLS13,
		MaxVersion:         tls.VersionTLS13,
		CurvePreferences:   arm.Groups,
		ClientSessionCache: nil, // no resumption: every request is a full handshake
		NextProtos:         []string{"http/1.1"},
		InsecureSkipVerify: c.Insecure, //nolint:gosec // explicit -insecure flag
	}
	tc.RootCAs = c.RootCAs
	var rc *tls.Config
	if arm.Resume > 0 {
		// Full handshakes store their tickets without offering one;
		// resumption attempts offer the latest.
		cache := tls.NewLRUClientSessionCache(16)
		tc.ClientSessionCache = storeOnly{cache}
		rc = tc.Clone()
		rc.ClientSessionCache = cache
	}
	hostHeader := host
	if hostHeader == "" {
		hostHeader = c.Target
	}
	path := c.Path
	if path == "" {
		path = "/"
	}
	req := "GET " + path + " HTTP/1.1\r\nHost: " + hostHeader +
		"\r\nUser-Agent: pqwatch-loadgen\r\nAccept: */*\r\nConnection: close\r\n" + RequestHeader + ": "
	return &requester{
		target:     c.Target,
		tlsConf:    tc,
		resumeConf: rc,
		req:        []byte(req),
		timeout:    c.Timeout,
		dialer:     net.Dialer{Timeout: c.Timeout, KeepAlive: -1},
	}
}

// do performs one request and fills r's outcome fields.
func (q *requester) do(ctx context.Context, r *Request) {
	ctx, cancel := context.WithTimeout(ctx, q.timeout)
	defer cancel()
	r.Start = time.Now()
	defer func() {
		end := time.Now()
		r.Latency = end.Sub(r.Intended)
		r.Service = end.Sub(r.Start)
	}()
	raw, err := q.dialer.DialContext(ctx, "tcp", q.target)
	if err != nil {
		r.fail("dial", err)
		return
	}
	defer raw.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	conf := q.tlsConf
	if r.ResumeAttempt && q.resumeConf != nil {
		conf = q.resumeConf
	}
	tc := tls.Client(raw, conf)
	if err := tc.HandshakeContext(ctx); err != nil {
		r.fail("handshake", err)
		return
	}
	cs := tc.ConnectionState()
	r.Group = GroupName(cs.CurveID)
	r.HRR = cs.HelloRetryRequest
	r.Resumed = cs.DidResume
	// The request names itself, so that a server's access log can be
	// joined with requests.csv: "t<trial id> s<seq> window|warmup".
	part := "window"
	if r.Warmup {
		part = "warmup"
	}
	req := fmt.Appendf(q.req[:len(q.req):len(q.req)], "t%d s%d %s\r\n\r\n", r.TrialID, r.Seq, part)
	if _, err := tc.Write(req); err != nil {
		r.fail("write", err)
		return
	}
	br := bufio.NewReaderSize(tc, 4096)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		r.fail("read", err)
		return
	}
	r.Status = resp.StatusCode
	if p := resp.Header.Get("X-Pid"); p != "" {
		r.PID, _ = strconv.Atoi(strings.TrimSpace(p))
	}
	// Drain the body and wait for the server's close, so the server side
	// holds TIME_WAIT and a long run does not exhaust client ports.
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if err != nil {
		r.fail("read", err)
		return
	}
	if resp.StatusCode >= 400 {
		r.Err = "http_" + strconv.Itoa(resp.StatusCode)
		r.ErrText = resp.Status
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(br, 1<<16))
	_ = tc.Close()
}

// storeOnly is a session cache that keeps the tickets a full handshake
// receives but offers none, so that the handshake stays full.
type storeOnly struct{ tls.ClientSessionCache }

func (storeOnly) Get(string) (*tls.ClientSessionState, bool) { return nil, false }

// resumeAttempt reports whether request seq of a trial offers a ticket:
// share of the requests, spread evenly (seq 0 never, having none yet).
func resumeAttempt(seq int, share float64) bool {
	if share <= 0 || seq == 0 {
		return false
	}
	return math.Floor(float64(seq+1)*share) > math.Floor(float64(seq)*share)
}

// maxErrText bounds the error text kept per request.
const maxErrText = 300

// fail records err as the request's outcome: its reason and its text.
func (r *Request) fail(stage string, err error) {
	r.Err = classify(stage, err)
	r.ErrText = err.Error()
	if len(r.ErrText) > maxErrText {
		r.ErrText = r.ErrText[:maxErrText] + "..."
	}
}

// classify turns an error into a short, bounded reason for counting.
func classify(stage string, err error) string {
	var (
		ne   net.Error
		ua   x509.UnknownAuthorityError
		he   x509.HostnameError
		ci   x509.CertificateInvalidError
		rhe  tls.RecordHeaderError
		verr *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &ua):
		return stage + "_unknown_authority"
	case errors.As(err, &he):
		return stage + "_bad_certificate_name"
	case errors.As(err, &ci) && ci.Reason == x509.Expired:
		return stage + "_certificate_expired"
	case errors.As(err, &ci):
		return stage + "_certificate_invalid"
	case errors.As(err, &verr):
		return stage + "_certificate_unverified"
	case errors.As(err, &rhe):
		return stage + "_not_tls"
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return stage + "_timeout"
	case errors.Is(err, context.Canceled):
		return stage + "_canceled"
	case errors.Is(err, syscall.ECONNREFUSED):
		return stage + "_refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return stage + "_reset"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return stage + "_no_port"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return stage + "_eof"
	}
	var ae tls.AlertError
	if errors.As(err, &ae) {
		return stage + "_alert"
	}
	// A TLS alert from the server: name it (a bounded set), so that
	// "protocol version not supported" or "handshake failure" is visible.
	if _, desc, ok := strings.Cut(err.Error(), "remote error: tls: "); ok {
		return stage + "_alert_" + strings.ReplaceAll(strings.TrimSpace(desc), " ", "_")
	}
	return stage + "_error"
}
