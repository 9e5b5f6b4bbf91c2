package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/node"
)

// Every way a configuration file is changed in place asks for one reload, through the same
// request a SIGHUP makes; a change a SIGHUP's reload already read asks for none; a FIFO put in
// the file's place is asked about (the reload refuses it) without the watcher ever opening it.
func TestConfigWatchAsksOncePerChange(t *testing.T) {
	write := func(t *testing.T, path, s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, dir, path string)
	}{
		{"written in place", func(t *testing.T, _, path string) { write(t, path, "log: {level: warn}\n") }},
		{"renamed into place", func(t *testing.T, dir, path string) {
			write(t, filepath.Join(dir, "new"), "log: {level: warn}\n")
			if err := os.Rename(filepath.Join(dir, "new"), path); err != nil {
				t.Fatal(err)
			}
		}},
		{"a FIFO in its place", func(t *testing.T, _, path string) {
			os.Remove(path)
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "narwhal.yaml")
			write(t, path, "log: {level: info}\n")
			w := newConfigWatch(path)
			var asked atomic.Int32
			ticks := make(chan time.Time)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				w.run(ctx, ticks, slog.New(slog.NewTextHandler(io.Discard, nil)), func() { asked.Add(1) })
			}()
			defer func() { cancel(); <-done }()
			// look lets the watcher look n times; when it returns, every look has been acted on
			// (the watcher took one more tick, so it had finished the last).
			look := func(n int) {
				for range n + 1 {
					ticks <- time.Now()
				}
			}

			tc.change(t, dir, path)
			look(2) // one look sees the change, the next that it settled
			if n := asked.Load(); n != 1 {
				t.Fatalf("%d reloads asked for one change", n)
			}
			look(3)
			if n := asked.Load(); n != 1 {
				t.Fatalf("%d reloads asked for one change, looked at again", n)
			}

			// A change a SIGHUP's reload read first: the watcher asks for none.
			write(t, filepath.Join(dir, "later"), "log: {level: error}\n")
			os.Remove(path)
			if err := os.Rename(filepath.Join(dir, "later"), path); err != nil {
				t.Fatal(err)
			}
			if _, err := w.wrap(func() (node.Runtime, error) { return node.Runtime{}, nil })(); err != nil {
				t.Fatal(err)
			}
			look(3)
			if n := asked.Load(); n != 1 {
				t.Fatalf("%d reloads asked after a change a SIGHUP reloaded; want still 1", n)
			}
			// One more change: asked for once more.
			write(t, path, "log: {level: debug}\n")
			look(2)
			if n := asked.Load(); n != 2 {
				t.Fatalf("%d reloads asked for two changes the watcher saw and one a SIGHUP reloaded; want 2", n)
			}
		})
	}
}
