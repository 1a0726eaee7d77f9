package logparse

import "testing"

func TestDiscoverFormat(t *testing.T) {
	conf, err := ParseNginxConfig([]byte(`log_format edge '$remote_addr $remote_port $msec "$request" $status';
log_format main '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent';`))
	if err != nil {
		t.Fatal(err)
	}
	edge := [][]byte{
		[]byte(`10.0.0.2 40000 1767268800.003 "GET / HTTP/1.1" 200`),
		[]byte(``),
		[]byte(`garbage`),
		[]byte(`10.0.0.3 40001 1767268800.004 "GET /x HTTP/1.1" 404`),
	}
	combined := [][]byte{[]byte(`10.0.0.2 - - [01/Jan/2026:12:00:00 +0000] "GET / HTTP/1.1" 200 5 "-" "curl/8"`)}
	for name, c := range map[string]struct {
		sample [][]byte
		want   string
		n      int
	}{
		"edge":     {edge, "edge", 2},
		"combined": {combined, "combined", 1},
		"nothing":  {[][]byte{[]byte("nope")}, "", 0},
	} {
		f, n := DiscoverFormat(c.sample, conf.Candidates())
		got := ""
		if f != nil {
			got = f.Name
		}
		if got != c.want || n != c.n {
			t.Errorf("%s: %q %d, want %q %d", name, got, n, c.want, c.n)
		}
	}
}
