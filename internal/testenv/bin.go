package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrMissing is matched (errors.Is) by the errors that say the machine lacks
// a prerequisite: root, or a program. The testing wrappers skip on them.
var ErrMissing = errors.New("missing prerequisite")

// missingError is a prerequisite the machine lacks; its text is all the
// message says.
type missingError string

func (e missingError) Error() string      { return string(e) }
func (missingError) Is(target error) bool { return target == ErrMissing }

// CheckRoot returns an ErrMissing error unless running as root.
func CheckRoot() error {
	if os.Geteuid() != 0 {
		return missingError("needs root (network namespaces, packet capture); CI runs as root")
	}
	return nil
}

// LookBin returns the path of the first named program, or an ErrMissing
// error naming the first that is not installed. caddy is also looked for in
// ~/go/bin, where .ci/run installs it.
func LookBin(names ...string) (string, error) {
	first := ""
	for _, n := range names {
		p, err := exec.LookPath(n)
		if err != nil {
			if n == "caddy" {
				if home, _ := os.UserHomeDir(); home != "" {
					if _, err := os.Stat(filepath.Join(home, "go/bin/caddy")); err == nil {
						p = filepath.Join(home, "go/bin/caddy")
					}
				}
			}
			if p == "" {
				return "", missingError(fmt.Sprintf("needs %s (installed by .ci/run)", n))
			}
		}
		if first == "" {
			first = p
		}
	}
	return first, nil
}

// NginxOpenSSL35Dir is where scripts/build-nginx-openssl35.sh caches nginx
// on OpenSSL 3.5 (the environment variable of that name moves it, for the
// script and the tests alike).
func NginxOpenSSL35Dir() string {
	if d := os.Getenv("PQWATCH_NGINX_OPENSSL35_DIR"); d != "" {
		return d
	}
	return "/var/cache/pqwatch/nginx-openssl35"
}

// LookNginxOpenSSL35 returns the path of the cached nginx on OpenSSL 3.5
// (Debian 12's nginx source built on Debian 13's OpenSSL 3.5, statically;
// see scripts/build-nginx-openssl35.sh) and its stamp (the versions), or an
// ErrMissing error saying why there is none and the command that builds it.
func LookNginxOpenSSL35() (bin, stamp string, err error) {
	dir := NginxOpenSSL35Dir()
	bin = filepath.Join(dir, "nginx")
	build := "build it once (as root, 6-20 minutes on 2 cores, cached for later runs): make nginx-openssl35"
	s, err := os.ReadFile(filepath.Join(dir, "stamp"))
	if err != nil {
		why := fmt.Sprintf("needs nginx on OpenSSL 3.5 in %s (no stamp)", dir)
		if f, err := os.ReadFile(filepath.Join(dir, "failed")); err == nil {
			line, _, _ := strings.Cut(string(f), "\n")
			why += "; the last build failed: " + line + " (the log's tail is in " + filepath.Join(dir, "failed") + ")"
		}
		return "", "", missingError(why + "; " + build)
	}
	out, err := exec.Command(bin, "-V").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "built with OpenSSL 3.5") {
		return "", "", missingError(fmt.Sprintf("the cached %s does not run as nginx on OpenSSL 3.5 (%v: %.200s); rebuild it: scripts/build-nginx-openssl35.sh -f", bin, err, out))
	}
	return bin, strings.TrimSpace(string(s)), nil
}
