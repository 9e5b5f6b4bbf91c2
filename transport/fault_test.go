package transport

import (
	"context"
	"fmt"
	"syscall"
	"testing"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// Running out of file descriptors is the router's trouble: a 503, no retry, and nothing
// against the engine (it once ejected healthy engines under 10,000 streams).
func TestRouterOutOfDescriptorsIsNotAnEngineFault(t *testing.T) {
	c := ClientFor(t, config.Engine{Name: "e", URL: "http://127.0.0.1:1", Role: config.RoleBoth}, nil)
	f := c.legFault(context.Background(), fault.PhaseDecode, fmt.Errorf("dial: %w", syscall.EMFILE), false, fault.FirstTokenTimeout, "")
	if f.Kind != fault.Overloaded || f.ClientStatus() != 503 || f.Retriable() || f.CountsAgainstEngine() {
		t.Fatalf("%+v", f)
	}
}
