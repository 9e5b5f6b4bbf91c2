package tests

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: every request, leg, stream,
// probe and timer the router starts must be gone once it shuts down. Three fasthttp background
// goroutines are exempt: they are owned by the library, sleep a fixed period and then notice on
// their own that their client or server is gone (the DNS cache cleaner lives for the process).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
	)
}
