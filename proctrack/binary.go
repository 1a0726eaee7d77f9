package proctrack

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// fileKey identifies one version of a file: a replaced or rewritten binary
// gets a new key even under the same path.
type fileKey struct {
	Dev, Ino uint64
	MtimeNs  int64
	Size     int64
}

// binInfo is what the tracker learns once per executable or library file.
type binInfo struct {
	SHA256  string // hex
	Version string // TLS library version string found in the file ("OpenSSL 3.0.19")
	GoVer   string // Go version for Go binaries
}

// fileCache caches hashes and version strings by dev+inode+mtime+size. It is
// bounded: when full, it is cleared (binaries change rarely).
type fileCache struct {
	mu  sync.Mutex
	max int
	m   map[fileKey]binInfo
}

func newFileCache(max int) *fileCache {
	return &fileCache{max: max, m: make(map[fileKey]binInfo)}
}

// maxScanBytes bounds how much of a file is hashed or scanned.
const maxScanBytes = 512 << 20

// inspect opens path (typically <proc>/PID/exe, which works even when the
// binary was deleted or replaced) and returns its key and info. wantHash and
// wantVersion select the work done on a cache miss.
func (c *fileCache) inspect(path string, wantHash, wantVersion bool) (fileKey, binInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return fileKey{}, binInfo{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fileKey{}, binInfo{}, err
	}
	key := statKey(fi)
	c.mu.Lock()
	info, ok := c.m[key]
	c.mu.Unlock()
	if ok && (!wantHash || info.SHA256 != "") && (!wantVersion || info.Version != "" || info.GoVer != "") {
		return key, info, nil
	}
	if wantHash && info.SHA256 == "" {
		h := sha256.New()
		if _, err := io.Copy(h, io.LimitReader(f, maxScanBytes)); err != nil {
			return key, info, fmt.Errorf("proctrack: hash %s: %w", path, err)
		}
		info.SHA256 = hex.EncodeToString(h.Sum(nil))
	}
	if wantVersion && info.Version == "" && info.GoVer == "" {
		// A Go program uses crypto/tls; its strings are no evidence of an
		// OpenSSL build.
		if bi, err := buildinfo.Read(f); err == nil {
			info.GoVer = bi.GoVersion
		} else if _, err := f.Seek(0, io.SeekStart); err == nil {
			info.Version, _ = scanVersion(f)
		}
	}
	c.mu.Lock()
	if len(c.m) >= c.max {
		clear(c.m)
	}
	c.m[key] = info
	c.mu.Unlock()
	return key, info, nil
}

// scanVersion streams r looking for a TLS library version string.
func scanVersion(r io.Reader) (string, error) {
	const chunk = 1 << 20
	const overlap = 64
	buf := make([]byte, chunk+overlap)
	keep := 0
	var total int64
	for total < maxScanBytes {
		n, err := io.ReadFull(r, buf[keep:])
		total += int64(n)
		if v := findTLSVersion(buf[:keep+n]); v != "" {
			return v, nil
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return "", nil
			}
			return "", err
		}
		keep = copy(buf, buf[keep+n-overlap:keep+n])
	}
	return "", nil
}

// trimDeleted strips the " (deleted)" suffix the kernel appends to the
// /proc/PID/exe link of a replaced or removed binary.
func trimDeleted(s string) (string, bool) {
	p, ok := strings.CutSuffix(s, " (deleted)")
	return p, ok
}
