package agent

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pqwatch/pqwatch/kubepod"
	"github.com/pqwatch/pqwatch/logjoin"
	"github.com/pqwatch/pqwatch/logparse"
	"github.com/pqwatch/pqwatch/record"
)

// Access logs found in kubelet's pod log directory (-pod-logs): every
// container's current log (DIR/NAMESPACE_POD_UID/CONTAINER/N.log, the
// highest N: the container's latest start) whose lines are an nginx access
// log in a built-in format (logparse.BuiltinFormats: pqwatch's, ingress-
// nginx's upstreaminfo, combined) or Caddy's JSON access log is tailed and
// joined as a configured one is. The directory is listed at start and
// every podLogRescan; a log with no access-log lines yet (a container that
// has served nothing, or whose stdout is empty) is looked at again every
// podLogCheck while it grows, one whose lines are no access log at each
// listing while it grows (a server's start-up lines on stdout may come
// before its first request). Each log is opened within the directory
// (logparse.OpenLog: no symbolic link out of it).

const (
	podLogCheck  = time.Second      // pending logs' growth checked
	podLogRescan = 10 * time.Second // the directory listed again
	// maxPodLogs bounds the container logs followed (taken, pending or
	// not taken); past it a new one is counted and said once.
	maxPodLogs = 1024
	// maxPodLogsNotTaken bounds the not-taken logs the summary lists.
	maxPodLogsNotTaken = 256
	podSampleLines     = 200
	podSampleBytes     = 64 << 10
)

// How a pod log's format was chosen (logjoin.LogFile.How).
const howPodLogs = "-pod-logs: its lines parse in it"

type podLogState int

const (
	podLogPending  podLogState = iota // no access-log lines yet
	podLogRejected                    // lines, no access log (yet)
	podLogTaken
)

// podLog is one container's log.
type podLog struct {
	path   string
	state  podLogState
	size   int64 // when last judged
	why    string
	cancel context.CancelFunc // taken: stops its tail
}

// podLogs finds the access logs under the pod log directory.
type podLogs struct {
	a   *Agent
	dir string

	mu       sync.Mutex
	logs     map[string]*podLog // container directory -> its log
	notTaken map[string]string  // path -> why (maxPodLogsNotTaken)
	over     bool               // maxPodLogs was reached (said once)

	confs map[string][]*logparse.Format // generation ID -> its conf's formats (mu)

	// take tails a log taken (Agent.tailAccess; tests record it).
	take func(ctx context.Context, wg *sync.WaitGroup, path, how string, lr *logjoin.LineReader, opts logparse.TailOptions)
}

// newPodLogs returns the discovery for dir, nil when dir is "" or not a
// directory.
func newPodLogs(a *Agent, dir string) *podLogs {
	if dir == "" {
		return nil
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		a.log.Info("-pod-logs: no such directory here: no pod's access log is looked for (not a Kubernetes node, or its pod logs are not mounted)", "dir", dir)
		return nil
	}
	return &podLogs{a: a, dir: filepath.Clean(dir), logs: map[string]*podLog{}, notTaken: map[string]string{}, confs: map[string][]*logparse.Format{}, take: a.tailAccess}
}

// startPodLogs looks for the pods' access logs until ctx ends.
func (a *Agent) startPodLogs(ctx context.Context, wg *sync.WaitGroup) {
	p := a.podLogs
	if p == nil {
		return
	}
	p.scan(ctx, wg, true)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(podLogCheck)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if time.Since(last) >= podLogRescan {
				last = time.Now()
				p.scan(ctx, wg, false)
			} else {
				p.checkPending(ctx, wg)
			}
		}
	}()
}

// currentLog is a container directory's current log: the N.log with the
// highest N, a regular file ("" when none).
func currentLog(dir string) string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	best, bestN := "", -1
	for _, e := range ents {
		n, ok := strings.CutSuffix(e.Name(), ".log")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if i, err := strconv.Atoi(n); err == nil && i >= 0 && i > bestN {
			best, bestN = filepath.Join(dir, e.Name()), i
		}
	}
	return best
}

// scan lists the directory: new container logs are judged, a container's
// newer log (a restart) replaces its old one, the logs of pods gone are
// let go; a not-taken log that grew is judged again. first: the scan at
// start (a log taken then is read from its end, as configured logs are;
// one taken later is new since the start: read from its beginning).
func (p *podLogs) scan(ctx context.Context, wg *sync.WaitGroup, first bool) {
	pods, err := os.ReadDir(p.dir)
	if err != nil {
		p.a.log.Warn("-pod-logs: cannot list the directory: no new pod's access log is found until it can", "dir", p.dir, "err", err)
		return
	}
	seen := map[string]bool{}
	taken, pending, rejected := 0, 0, 0
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pe := range pods {
		// Directories only, never a link: nothing outside the directory.
		if !pe.IsDir() {
			continue
		}
		if _, _, _, ok := kubepod.FromDirName(pe.Name()); !ok {
			continue
		}
		podDir := filepath.Join(p.dir, pe.Name())
		cs, err := os.ReadDir(podDir)
		if err != nil {
			continue
		}
		for _, ce := range cs {
			if !ce.IsDir() {
				continue
			}
			cdir := filepath.Join(podDir, ce.Name())
			path := currentLog(cdir)
			if path == "" {
				continue
			}
			seen[cdir] = true
			e := p.logs[cdir]
			switch {
			case e == nil:
				if len(p.logs) >= maxPodLogs {
					if !p.over {
						p.over = true
						p.a.log.Warn("-pod-logs: too many container logs: the rest are not looked at", "limit", maxPodLogs, "first_left_out", path)
					}
					continue
				}
				e = &podLog{path: path}
				p.logs[cdir] = e
				p.judge(ctx, wg, e, first)
			case e.path != path:
				// The container started again: its new log replaces the old.
				if e.cancel != nil {
					e.cancel()
				}
				*e = podLog{path: path}
				p.judge(ctx, wg, e, false)
			case e.state != podLogTaken:
				if st, err := os.Stat(path); err == nil && st.Size() != e.size {
					p.judge(ctx, wg, e, false)
				}
			}
			switch e.state {
			case podLogTaken:
				taken++
			case podLogPending:
				pending++
			default:
				rejected++
			}
		}
	}
	for cdir, e := range p.logs {
		if !seen[cdir] {
			if e.cancel != nil {
				e.cancel()
			}
			delete(p.logs, cdir)
		}
	}
	if first {
		p.a.log.Info("-pod-logs: container logs looked at", "dir", p.dir, "taken", taken, "no_lines_yet", pending, "not_taken", rejected)
	}
}

// checkPending judges again the logs without lines yet that grew.
func (p *podLogs) checkPending(ctx context.Context, wg *sync.WaitGroup) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.logs {
		if e.state != podLogPending {
			continue
		}
		if st, err := os.Stat(e.path); err == nil && st.Size() != e.size {
			p.judge(ctx, wg, e, false)
		}
	}
}

// judge reads the end of e's log and takes it when its lines are an access
// log; fromEnd: its tail starts at its end.
func (p *podLogs) judge(ctx context.Context, wg *sync.WaitGroup, e *podLog, fromEnd bool) {
	dirs := []string{p.dir}
	if st, err := os.Stat(e.path); err == nil {
		e.size = st.Size()
	}
	sample, err := logparse.SampleLines(e.path, dirs, true, podSampleLines, podSampleBytes)
	if err != nil {
		p.reject(e, "cannot be read: "+err.Error())
		return
	}
	c := logparse.ClassifyAccessLog(sample, p.candidates())
	pod, _ := kubepod.FromLogPath(e.path)
	switch {
	case c.Kind == "" && c.Lines == 0:
		e.state = podLogPending
		p.a.log.Debug("-pod-logs: container log without access-log lines yet: looked at again as it grows", "path", e.path)
		return
	case c.Kind == "":
		p.reject(e, c.Why)
		return
	}
	var lr *logjoin.LineReader
	as := c.Kind
	if c.Kind == logparse.KindCaddy {
		lr = logjoin.NewCaddyReader()
	} else {
		lr = logjoin.NewNginxReader(c.Format)
		as += " log_format " + c.Format.Name
	}
	opts := p.a.tailOpts(e.path)
	opts.SymlinkDirs = dirs
	if !fromEnd {
		opts.StartAtEnd = false
	}
	tctx, cancel := context.WithCancel(ctx)
	e.state, e.cancel, e.why = podLogTaken, cancel, ""
	delete(p.notTaken, e.path)
	p.a.log.Info("-pod-logs: container log taken", "path", e.path, "as", as, "parsed", c.Parsed, "of", c.Lines,
		"namespace", pod.Namespace, "pod", pod.Name, "container", pod.Container, "from", map[bool]string{true: "its end", false: "its beginning"}[fromEnd])
	p.take(tctx, wg, e.path, howPodLogs, lr, opts)
}

// reject says (once per log) why e is not taken.
func (p *podLogs) reject(e *podLog, why string) {
	if e.state == podLogRejected && e.why == why {
		return
	}
	if e.state != podLogRejected {
		p.a.log.Info("-pod-logs: container log not taken", "path", e.path, "reason", why)
	}
	e.state, e.why = podLogRejected, why
	if _, ok := p.notTaken[e.path]; ok || len(p.notTaken) < maxPodLogsNotTaken {
		p.notTaken[e.path] = why
	}
}

// notTakenLogs lists the container logs not taken and why, by path.
func (p *podLogs) notTakenLogs() []logjoin.NotTaken {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []logjoin.NotTaken
	for _, e := range p.logs {
		if e.state == podLogPending {
			out = append(out, logjoin.NotTaken{Path: e.path, Reason: "no access-log lines (no stdout lines)"})
		}
	}
	for path, why := range p.notTaken {
		out = append(out, logjoin.NotTaken{Path: path, Reason: why})
	}
	slices.SortFunc(out, func(a, b logjoin.NotTaken) int { return strings.Compare(a.Path, b.Path) })
	if len(out) > maxPodLogsNotTaken {
		out = out[:maxPodLogsNotTaken]
	}
	return out
}

// maxConfBytes bounds an nginx.conf read for its log formats.
const maxConfBytes = 1 << 20

// candidates are the formats a pod log's lines are tried in: the built-in
// ones, then the log_format lines of every live nginx generation's
// configuration, read through its master's /proc/PID/root (the pod's own
// filesystem for an nginx in a pod) and confined to it
// (logparse.OpenInRoot: no link leads out of that root).
// Called with p.mu held.
func (p *podLogs) candidates() []*logparse.Format {
	out := logparse.BuiltinFormats()
	t := p.a.procs
	if t == nil {
		return out
	}
	for _, g := range t.Generations() {
		if !g.Alive || g.Kind != record.GenerationNginx || g.Config == "" {
			continue
		}
		fs, ok := p.confs[g.ID]
		if !ok {
			fs = p.readConf(g.MasterPID, g.Config)
			if len(p.confs) >= 64 {
				p.confs = map[string][]*logparse.Format{}
			}
			p.confs[g.ID] = fs
		}
		out = append(out, fs...)
	}
	return out
}

// readConf reads the log formats of the nginx.conf conf of master pid
// through its root; none when it cannot be read (said at debug level).
func (p *podLogs) readConf(pid int, conf string) []*logparse.Format {
	root := filepath.Join(p.a.cfg.ProcRoot, strconv.Itoa(pid), "root")
	f, err := logparse.OpenInRoot(root, conf)
	if err != nil {
		p.a.log.Debug("-pod-logs: an nginx's configuration cannot be read for its log formats", "pid", pid, "conf", conf, "err", err)
		return nil
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfBytes))
	if err != nil {
		return nil
	}
	c, _ := logparse.ParseNginxConfig(b)
	if c == nil {
		return nil
	}
	var out []*logparse.Format
	for _, f := range c.Candidates() {
		if f != logparse.Combined {
			out = append(out, f)
		}
	}
	return out
}
