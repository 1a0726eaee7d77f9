package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
