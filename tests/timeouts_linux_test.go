//go:build linux

package tests

import (
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
)

// unreachableEngine returns the URL of a loopback address where a TCP connect hangs: a listener
// with a full accept queue, which drops further SYNs. Everything closes when the test ends.
func unreachableEngine(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "unreachable")
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	filler, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second) // fills the accept queue
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { filler.Close() })
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), 100*time.Millisecond); err == nil {
		c.Close()
		t.Skip("this kernel completes connects to a full accept queue")
	}
	return "http://" + ln.Addr().String()
}

// A connect that hangs is timeout-shaped: engine.connect_timeout_s ends it with a 504, and on
// the decode leg the connect spends the first-token budget.
func TestConnectThatHangsIs504(t *testing.T) {
	t.Run("connect_timeout_s", func(t *testing.T) {
		h := start(t, setup{admit: true, prefill: 1, decode: 1, config: configs(timeouts(10, 10, 10), func(c *config.Config) {
			c.Engine.ConnectTimeoutS = 0.25
			c.Engines[0].URL = unreachableEngine(t) // p0
		})})
		r := h.send("/v1/completions", completion("hi", true))
		expectError(t, r, 504, "timeout", "could not connect to the engine in time")
		expectElapsed(t, r, 250*time.Millisecond)
		h.expectAccess(r.id, 504, 1, "timeout")
	})
	t.Run("decode connect spends the first-token budget", func(t *testing.T) {
		h := start(t, setup{admit: true, prefill: 1, decode: 1, config: configs(timeouts(10, 0.3, 10), func(c *config.Config) {
			c.Engine.ConnectTimeoutS = 5
			c.Engines[1].URL = unreachableEngine(t) // d0
		})})
		r := h.send("/v1/completions", completion("hi", true))
		expectError(t, r, 504, "first_token_timeout", "no token from the decode engine within 300ms")
		expectElapsed(t, r, 300*time.Millisecond)
		h.expectLegs(1, 0)
	})
}
