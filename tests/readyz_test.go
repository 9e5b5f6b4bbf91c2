package tests

import (
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
)

// /readyz's 503 names why each engine of the missing role is out: what ejected it, or its join
// check's outcome, not only its state.
func TestReadyzSaysWhyEachEngineOfTheMissingRoleIsOut(t *testing.T) {
	t.Run("ejected by an operator", func(t *testing.T) {
		h := start(t, setup{prefill: 1, decode: 1, config: func(c *config.Config) { c.Recovery.ProbeIntervalS, c.Recovery.ProbeMaxIntervalS = 30, 30 }})
		h.simEngine("d0").SetDead(true) // no probe readmits it
		if code, body := h.adminDo("POST", "/engines/d0/eject?reason=disk+swap"); code != 200 {
			t.Fatalf("eject: %d %s", code, body)
		}
		h.expectReadyz("d0 ejected [disk swap]")
	})
}

// expectReadyz waits until /readyz answers 503 with every want in its body.
func (h *harness) expectReadyz(want ...string) {
	h.t.Helper()
	var code int
	var body []byte
	eventually(h.t, 10*time.Second, func() bool {
		code, body = h.adminDo("GET", "/readyz")
		if code != 503 {
			return false
		}
		for _, w := range want {
			if !strings.Contains(string(body), w) {
				return false
			}
		}
		return true
	}, func() string { return "readyz: " + string(body) })
}
