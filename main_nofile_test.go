package main

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Running out of file descriptors pauses accepting instead of ending the process: with a
// nofile limit of 128 and 300 idle connections, `narwhal serve` logs the exhaustion, keeps
// serving a connection it already had, and serves new ones once the idle ones close.
func TestServeSurvivesDescriptorExhaustion(t *testing.T) {
	p := serveFleet(t, "drain_delay_s: 0", "prlimit", "--nofile=128:128")
	kept := &http.Client{Timeout: 5 * time.Second} // keeps its connection across the exhaustion
	health := func(c *http.Client) int {
		resp, err := c.Get("http://" + p.addr + "/health")
		if err != nil {
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := health(kept); code != 200 {
		t.Fatalf("/health %d before the exhaustion", code)
	}

	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range 300 {
		c, err := net.DialTimeout("tcp", p.addr, 2*time.Second)
		if err != nil {
			break // the backlog is full: exhausted all the same
		}
		idle = append(idle, c)
	}
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(p.log.String(), "out of file descriptors") },
		func() string { return "no exhaustion logged after " + itoa(len(idle)) + " idle connections" })
	if code := health(kept); code != 200 {
		t.Fatalf("/health on a connection opened before the exhaustion: %d", code)
	}
	select {
	case <-p.exited:
		t.Fatalf("narwhal serve exited on descriptor exhaustion:\n%s", p.log)
	default:
	}
	for _, c := range idle {
		c.Close()
	}
	idle = nil
	fresh := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	waitFor(t, 10*time.Second, func() bool { return health(fresh) == 200 }, func() string { return "new connections not served after the idle ones closed" })
	if lines := strings.Count(p.log.String(), "out of file descriptors"); lines > 3 {
		t.Fatalf("the exhaustion was logged %d times: want a throttled line", lines)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
