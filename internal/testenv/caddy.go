package testenv

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// CaddyConf is a Caddy JSON config template: one HTTP/1.1 server on
// 127.0.0.1:{{port}} with "tls internal" for localhost and Caddy's default
// key exchange (Caddy 2.11: X25519MLKEM768, x25519, secp256r1, chosen by
// Go's rule) from TLS 1.2 (Caddy's default minimum), answering every
// request 200 "ok\n"; no admin endpoint, storage in {{dir}}/data, errors
// logged to {{dir}}/caddy.log.
const CaddyConf = `{
  "admin": {"disabled": true},
  "storage": {"module": "file_system", "root": "{{dir}}/data"},
  "logging": {"logs": {"default": {"level": "ERROR", "writer": {"output": "file", "filename": "{{dir}}/caddy.log"}}}},
  "apps": {
    "http": {"servers": {"s": {
      "listen": ["127.0.0.1:{{port}}"],
      "protocols": ["h1"],
      "automatic_https": {"disable_redirects": true},
      "tls_connection_policies": [{"protocol_min": "tls1.2"}],
      "routes": [{"handle": [{"handler": "static_response", "status_code": 200, "body": "ok\n"}]}]
    }}},
    "tls": {
      "certificates": {"automate": ["localhost"]},
      "automation": {"policies": [{"subjects": ["localhost"], "issuers": [{"module": "internal"}]}]}
    },
    "pki": {"certificate_authorities": {"local": {"install_trust": false}}}
  }
}`

// Caddy is a running Caddy binary with its own directory.
type Caddy struct {
	Dir  string // its HOME, XDG dirs and {{dir}}: the caller's
	Addr string // 127.0.0.1:port
	Port int

	cmd  *exec.Cmd
	out  *bytes.Buffer // stdout and stderr
	once sync.Once
}

// StartCaddyE writes conf into dir/caddy.json, {{dir}} replaced by dir and
// {{port}} by port, and runs "caddy run" on it with HOME and the XDG dirs
// set to dir; it returns once Caddy completes a TLS handshake on
// 127.0.0.1:port for SNI localhost (certificate unchecked), trying for 20 s.
// ctx bounds the start only. Stop stops it.
func StartCaddyE(ctx context.Context, dir, conf string, port int) (*Caddy, error) {
	bin, err := LookBin("caddy")
	if err != nil {
		return nil, err
	}
	conf = strings.NewReplacer("{{dir}}", dir, "{{port}}", strconv.Itoa(port)).Replace(conf)
	confFile := filepath.Join(dir, "caddy.json")
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	c := &Caddy{Dir: dir, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, out: new(bytes.Buffer)}
	c.cmd = exec.Command(bin, "run", "--config", confFile)
	c.cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("cannot start caddy: %v", err)
	}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
		tc, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", c.Addr, &tls.Config{InsecureSkipVerify: true, ServerName: "localhost"})
		if err == nil {
			tc.Close()
			return c, nil
		}
	}
	c.Stop()
	return nil, fmt.Errorf("caddy did not serve TLS on %s:\n%s%s", c.Addr, c.out.String(), readFile(filepath.Join(dir, "caddy.log")))
}

// PID is the Caddy process's id.
func (c *Caddy) PID() int { return c.cmd.Process.Pid }

// Stop interrupts Caddy and waits for it to exit; later calls do nothing.
func (c *Caddy) Stop() {
	c.once.Do(func() {
		_ = c.cmd.Process.Signal(os.Interrupt)
		_ = c.cmd.Wait()
	})
}
