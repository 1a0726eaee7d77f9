package deploy

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// dockerInstr is one Dockerfile instruction, continuation lines joined.
type dockerInstr struct {
	cmd  string // upper case: FROM, RUN, COPY...
	args string
}

func parseDockerfile(t *testing.T, path string) []dockerInstr {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []dockerInstr
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(strings.TrimSuffix(line, "\\") + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, dockerInstr{strings.ToUpper(cmd), strings.TrimSpace(args)})
		cur.Reset()
	}
	return out
}

// shellWords splits a simple POSIX shell command line: words, single and
// double quotes, no expansions (the Dockerfile's build step needs no more).
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case c == '\'' || c == '"':
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				return nil, fmt.Errorf("unterminated quote in %q", s)
			}
			w.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '$' || c == '`' || c == ';' || c == '|' || c == '&':
			return nil, fmt.Errorf("shell syntax %q not supported in %q", c, s)
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// TestDockerfileBuildsStaticBinary builds the image's binary the way the
// Dockerfile does, without Docker: its own `go build` RUN step, run here
// from the repository root (the build context, WORKDIR of the build stage),
// then checks that what the final stage copies is a static, stripped ELF
// that runs without anything from the base image.
func TestDockerfileBuildsStaticBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the pqwatch binary: not in -short")
	}
	instrs := parseDockerfile(t, "Dockerfile")

	var froms []string
	var buildRun, copyFrom, entrypoint, user string
	for _, in := range instrs {
		switch in.cmd {
		case "FROM":
			froms = append(froms, in.args)
		case "RUN":
			if strings.Contains(in.args, "go build") {
				buildRun = in.args
			}
		case "COPY":
			if strings.HasPrefix(in.args, "--from=") {
				copyFrom = in.args
			}
		case "ENTRYPOINT":
			entrypoint = in.args
		case "USER":
			user = in.args
		}
	}
	if len(froms) != 2 || !strings.HasPrefix(froms[0], "golang:1.26 ") || !strings.HasPrefix(froms[1], "gcr.io/distroless/static") {
		t.Fatalf("stages %q: want golang:1.26 then distroless/static", froms)
	}
	if user != "65532:65532" {
		t.Errorf("USER %q: the image's default user is nonroot 65532", user)
	}
	if buildRun == "" {
		t.Fatal("no RUN ... go build step")
	}
	words, err := shellWords(buildRun)
	if err != nil {
		t.Fatal(err)
	}
	// Leading NAME=value words are the step's environment.
	env := append(os.Environ(), "GOFLAGS=")
	for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
		env = append(env, words[0])
		words = words[1:]
	}
	if len(words) < 2 || words[0] != "go" || words[1] != "build" {
		t.Fatalf("build step %q is not `go build`", buildRun)
	}
	if !slicesContains(env, "CGO_ENABLED=0") || !slicesContains(words, "-trimpath") {
		t.Errorf("build step %q: want CGO_ENABLED=0 and -trimpath", buildRun)
	}
	// Redirect -o to a temp dir; remember where the image expects it.
	out := filepath.Join(t.TempDir(), "pqwatch")
	imagePath := ""
	for i := range words {
		if words[i] == "-o" && i+1 < len(words) {
			imagePath = words[i+1]
			words[i+1] = out
		}
	}
	if imagePath == "" {
		t.Fatal("build step has no -o")
	}
	// The final stage copies exactly that file and runs it.
	cf, err := shellWords(copyFrom)
	if err != nil || len(cf) != 3 || cf[0] != "--from=build" || cf[1] != imagePath {
		t.Fatalf("COPY %q does not copy the built %s", copyFrom, imagePath)
	}
	if !strings.Contains(entrypoint, `"`+cf[2]+`"`) {
		t.Errorf("ENTRYPOINT %s does not run %s", entrypoint, cf[2])
	}

	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", words[1:]...)
	cmd.Dir = root
	cmd.Env = env
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(words[1:], " "), err, b)
	}

	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("binary has PT_INTERP: it needs a dynamic loader distroless/static lacks")
		}
		if p.Type == elf.PT_DYNAMIC {
			t.Error("binary has a PT_DYNAMIC segment")
		}
	}
	if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
		t.Errorf("binary needs shared libraries (DT_NEEDED): %v", libs)
	}
	if f.Section(".symtab") != nil {
		t.Error("binary has .symtab: -ldflags -s missing")
	}
	bin, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(bin, []byte(root+"/")) {
		t.Errorf("binary contains the build path %s: -trimpath missing", root)
	}
	// It runs, alone, with an empty environment (as in distroless).
	run := exec.Command(out, "version")
	run.Env = []string{}
	if b, err := run.CombinedOutput(); err != nil || !strings.HasPrefix(string(b), "pqwatch ") {
		t.Errorf("built binary `version`: %v %q", err, b)
	}
	fi, _ := os.Stat(out)
	t.Logf("static binary %d bytes", fi.Size())
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
