package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/narwhal-router/narwhal/node"
)

// configPollInterval is how often serve looks at its configuration file for a change. A change
// is reloaded once the file has stayed as it is for one more interval (a debounce: a config
// manager that writes in steps, or Kubernetes swapping a ConfigMap volume's `..data` link, is
// one reload), so a change applies one to two intervals after it was made.
const configPollInterval = time.Second

// fileIdentity is what the watcher compares: where the path leads once every symlink is
// followed, and that file's identity, size and modification time. Kubernetes updates a mounted
// ConfigMap by pointing the volume's `..data` symlink at a new directory, so the path's target
// changes though the path, and the file it names, never do; an editor's rename-into-place
// changes the identity; a write in place changes the size or the time.
type fileIdentity struct {
	target string
	info   os.FileInfo
	err    string
}

func identify(path string) fileIdentity {
	target, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fileIdentity{err: err.Error()}
	}
	info, err := os.Stat(target)
	if err != nil {
		return fileIdentity{target: target, err: err.Error()}
	}
	return fileIdentity{target: target, info: info}
}

func (a fileIdentity) same(b fileIdentity) bool {
	if a.target != b.target || a.err != b.err || (a.info == nil) != (b.info == nil) {
		return false
	}
	return a.info == nil || (os.SameFile(a.info, b.info) && a.info.Size() == b.info.Size() &&
		a.info.ModTime().Equal(b.info.ModTime()) && a.info.Mode() == b.info.Mode())
}

// configWatch watches the configuration file at path for a change.
type configWatch struct {
	path string
	// loaded is the file as the last reload (whatever asked for it) found it: a change a
	// SIGHUP already reloaded is not reloaded again.
	loaded atomic.Pointer[fileIdentity]
}

func newConfigWatch(path string) *configWatch {
	w := &configWatch{path: path}
	w.loaded.Store(ptr(identify(path)))
	return w
}

func ptr[T any](v T) *T { return &v }

// wrap is load noting the file it is about to read.
func (w *configWatch) wrap(load func() (node.Runtime, error)) func() (node.Runtime, error) {
	return func() (node.Runtime, error) {
		w.loaded.Store(ptr(identify(w.path)))
		return load()
	}
}

// run calls request (the path SIGHUP takes: the same reload, the same refusal rules) when the
// file differs from what the last reload read and has stayed as it is from one tick to the
// next, until ctx ends. It only looks at the file's identity (a stat, never a read, so a FIFO
// put in its place blocks nothing); a file that does not load is refused by the reload, and is
// not reloaded again until it changes once more.
func (w *configWatch) run(ctx context.Context, ticks <-chan time.Time, log *slog.Logger, request func()) {
	last := identify(w.path)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
		now := identify(w.path)
		settled := now.same(last)
		last = now
		if settled && !now.same(*w.loaded.Load()) {
			log.Info("the configuration file changed: reloading it", "path", w.path, "target", now.target)
			w.loaded.Store(ptr(now)) // asked once; the reload notes it again as it reads
			request()
		}
	}
}
