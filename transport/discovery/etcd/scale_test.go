package etcd

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/transport/discovery"
	"github.com/narwhal-router/narwhal/transport/discovery/internal/sourcetest"
)

// A burst of registrations is applied as it lands, each value parsed once: n keys (1,000 by
// default; NARWHAL_ETCD_REGISTRATIONS=5000 for the figure) written at once are all
// reported within 5 s of the last write, in a few reports rather than one per key; a value
// over MaxValueBytes is left out unparsed and logged once, however often the prefix changes.
func TestBurstOfRegistrationsIsAppliedIncrementally(t *testing.T) {
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("NARWHAL_ETCD_REGISTRATIONS")); err == nil && v > 0 {
		n = v
	}
	e := sourcetest.StartEtcd(t)
	c := client(t, e.URL)
	var log sourcetest.LogBuffer
	rec := sourcetest.Start(t, newSource(e.URL, &log))
	rec.WaitNames(t, 5*time.Second)
	put(t, c, prefix+"huge", `{"url": "http://10.9.9.9:8000", "role": "decode", "models": ["`+strings.Repeat("m", MaxValueBytes)+`"]}`)

	var wg sync.WaitGroup
	const writers = 16
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += writers {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := c.Put(ctx, fmt.Sprintf("%sd%05d", prefix, i), fmt.Sprintf(`{"url": "http://10.%d.%d.%d:8000", "role": "decode"}`, i>>16&255, i>>8&255, i&255))
				cancel()
				if err != nil {
					t.Errorf("put %d: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	written := time.Now()
	rec.Wait(t, 5*time.Second, fmt.Sprintf("all %d registrations", n), func(r discovery.Report) bool { return len(r.Engines) == n })
	t.Logf("%d registrations applied %v after the last write; %d reports during the burst",
		n, time.Since(written).Round(time.Millisecond), rec.Count())
	if rec.Count() > n/2 {
		t.Fatalf("%d reports for %d registrations: the burst was not coalesced", rec.Count(), n)
	}
	if got := strings.Count(log.String(), "larger than the"); got != 1 {
		t.Fatalf("the oversized value was logged %d times, want once:\n%.2000s", got, log.String())
	}
}
