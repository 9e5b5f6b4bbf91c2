package tests

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: every request, leg, stream,
// probe and timer the router starts must be gone once it shuts down. Library goroutines that end
// on their own are exempt: three of fasthttp's (they sleep a fixed period, then notice their
// client or server is gone; the DNS cache cleaner lives for the process) and protoactor's
// dead-letter throttle, which lives one throttle interval after a message reached a stopped actor.
// And zmq4 v0.17.0's PUB socket never ends its writer goroutine (pubMWriter.run waits on its
// condition for good after Close): one idle goroutine per simulated engine publishing KV events.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		goleak.IgnoreAnyFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"),
		goleak.Cleanup(removeNarwhalBinary), // the binary the cluster tests run
	)
}
