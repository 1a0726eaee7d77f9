//go:build !linux

package proctrack

// changeWatch is Linux's pidfd and inotify watch (watch_linux.go); elsewhere
// the probe asks /proc as it always did.
type changeWatch struct{}

func newChangeWatch(bool) *changeWatch                            { return nil }
func (w *changeWatch) coversProc(procKey) bool                    { return false }
func (w *changeWatch) coversPidFile(procKey) bool                 { return false }
func (w *changeWatch) watchProc(procKey, func() (uint64, bool))   {}
func (w *changeWatch) watchPidFile(procKey, string, string, bool) {}
func (w *changeWatch) forget(map[int]procKey)                     {}
func (w *changeWatch) poll() bool                                 { return false }
func (w *changeWatch) close()                                     {}
func (w *changeWatch) takeRenamed() map[procKey]bool              { return nil }
