package exporter

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/exporter-toolkit/web"
)

// ServerConfig configures the metrics endpoint (/metrics, /healthz).
type ServerConfig struct {
	Listener net.Listener
	Handler  http.Handler
	// WebConfigFile is an exporter-toolkit web configuration (TLS, basic
	// auth), node_exporter's -web.config.file; "" serves plain HTTP.
	WebConfigFile string
	// MaxConns caps open connections (default DefaultMaxConns). At the cap a
	// new connection closes the oldest one that is not serving a request
	// (idle keep-alive, or opened without a request yet), so idle clients
	// can never starve the liveness probe or a scrape.
	MaxConns int
	Logger   *slog.Logger
}

// DefaultMaxConns is enough for Prometheus servers, probes and a few
// people, far below a DaemonSet's file descriptor limit.
const DefaultMaxConns = 64

// Timeouts of the metrics endpoint: a scrape of a busy agent takes
// milliseconds.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 60 * time.Second
)

// Server is a running metrics endpoint.
type Server struct {
	srv  *http.Server
	lim  *capListener
	done chan error
}

// StartServer validates the web configuration and serves until Shutdown.
func StartServer(cfg ServerConfig) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.WebConfigFile != "" {
		if err := web.Validate(cfg.WebConfigFile); err != nil {
			return nil, fmt.Errorf("exporter: -web.config.file %s: %w", cfg.WebConfigFile, err)
		}
	}
	lim := newCapListener(cfg.Listener, cfg.MaxConns)
	srv := &http.Server{
		Handler: cfg.Handler, ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: readTimeout,
		WriteTimeout: writeTimeout, IdleTimeout: idleTimeout, ConnState: lim.state,
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
	}
	s := &Server{srv: srv, lim: lim, done: make(chan error, 1)}
	webFile := cfg.WebConfigFile
	addrs := []string{cfg.Listener.Addr().String()}
	systemd := false
	go func() {
		err := web.Serve(lim, srv, &web.FlagConfig{WebListenAddresses: &addrs, WebSystemdSocket: &systemd, WebConfigFile: &webFile}, cfg.Logger)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		if err != nil {
			cfg.Logger.Error("metrics server", "err", err)
		}
		s.done <- err
	}()
	return s, nil
}

// Evicted counts connections closed to make room at the cap.
func (s *Server) Evicted() uint64 {
	s.lim.mu.Lock()
	defer s.lim.mu.Unlock()
	return s.lim.evicted
}

// Shutdown stops the server, waiting for requests in flight within ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	select {
	case <-s.done:
	case <-ctx.Done():
	}
	return err
}

// capListener keeps at most max connections open: accepting one more
// closes the oldest connection not serving a request.
type capListener struct {
	net.Listener
	max     int
	mu      sync.Mutex
	conns   map[string]*list.Element // by remote address; values *trackedConn
	order   *list.List               // oldest first
	evicted uint64
}

type trackedConn struct {
	c      net.Conn
	active bool
}

func newCapListener(l net.Listener, max int) *capListener {
	return &capListener{Listener: l, max: max, conns: map[string]*list.Element{}, order: list.New()}
}

func (l *capListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.order.Len() >= l.max {
		e := l.order.Front()
		for e != nil && e.Value.(*trackedConn).active {
			e = e.Next()
		}
		if e == nil {
			break // every connection serves a request: let this one wait its turn
		}
		tc := e.Value.(*trackedConn)
		l.order.Remove(e)
		delete(l.conns, tc.c.RemoteAddr().String())
		tc.c.Close()
		l.evicted++
	}
	l.conns[c.RemoteAddr().String()] = l.order.PushBack(&trackedConn{c: c})
	return c, nil
}

// state follows http.Server's view of each connection (a *tls.Conn under
// TLS: connections are matched by remote address).
func (l *capListener) state(c net.Conn, s http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.conns[c.RemoteAddr().String()]
	if !ok {
		return
	}
	tc := e.Value.(*trackedConn)
	switch s {
	case http.StateActive:
		tc.active = true
	case http.StateIdle:
		// Idle again: now the newest idle connection.
		tc.active = false
		l.order.MoveToBack(e)
	case http.StateClosed, http.StateHijacked:
		l.order.Remove(e)
		delete(l.conns, c.RemoteAddr().String())
	}
}
