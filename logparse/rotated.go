package logparse

import (
	"os"
	"path/filepath"
	"strings"
)

// rotatedSibling opens the file dev/ino when it is in the path's directory
// named path+".SUFFIX": kubelet renames a container's 0.log to
// 0.log.20261205-085845 (and gzips it at a later rotation, into another
// inode). nil when there is none.
func (t *Tailer) rotatedSibling(dev, ino uint64) *tfile {
	dir, base := filepath.Split(t.path)
	if dir == "" {
		dir = "."
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), base+".") || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		if d, i := fileID(fi); d != dev || i != ino {
			continue
		}
		tf, err := t.openAt(filepath.Join(dir, e.Name()), 0)
		if err != nil {
			return nil
		}
		if tf.dev != dev || tf.ino != ino { // replaced since the listing
			tf.f.Close()
			return nil
		}
		return tf
	}
	return nil
}
