package kubernetes

import (
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// A frozen API server — a stopped process, a wedged watch cache, a proxy that holds the
// connection — keeps a watch open and sends nothing: no event, no bookmark, no error. A watch
// alone would wait through it for ever (HTTP/2 pings notice a stopped process after about 45 s,
// and nothing notices a proxy that answers them). So every watch asks the API server to end it
// after watch_timeout_s (timeoutSeconds, which the server honours whatever it has to send; the
// informer then watches again from the revision it reached, without a new list), and a watch
// still open config.KubernetesWatchGrace later — or a request for one still unanswered — is a
// stall: the session fails, its last set
// stands, the failure is logged and counted like any, and the next session lists afresh on new
// connections.

// plainListWatch lists, then watches: it declines client-go's streamed lists (a watch that
// begins with every object), which older API servers refuse, so that each call it makes is one
// whose failure means the API server failed.
type plainListWatch struct{ *cache.ListWatch }

// IsWatchListSemanticsUnSupported tells the reflector to list, then watch.
func (plainListWatch) IsWatchListSemanticsUnSupported() bool { return true }

// watchOptions are the informer's watch options with the source's timeoutSeconds.
func (s *Source) watchOptions(o metav1.ListOptions) metav1.ListOptions {
	secs := int64(s.watchTimeout / time.Second)
	o.TimeoutSeconds = &secs
	o.Watch = true
	return o
}

// watchdog starts the clock of a watch about to be requested: the watch (or the request for
// it, which a frozen API server never answers) is reported to fail as a stall of what if the
// informer has not stopped it config.KubernetesWatchGrace after its timeoutSeconds. wrap gives
// it the watch once the request returned; stop is for a request that failed.
func (s *Source) watchdog(what string, fail func(error)) *watchdogged {
	began := time.Now()
	d := &watchdogged{}
	d.timer = time.AfterFunc(s.watchTimeout+s.watchGrace, func() {
		fail(fmt.Errorf("watch %s in %s: %w: the watch is still open %v after it began, past its timeout of %v",
			what, s.namespace, ErrStalled, time.Since(began).Round(time.Second), s.watchTimeout))
	})
	return d
}

// ErrStalled is the failure of a watch the API server kept open past its timeout.
var ErrStalled = errors.New("the API server stalled")

type watchdogged struct {
	watch.Interface
	timer *time.Timer
}

func (d *watchdogged) wrap(w watch.Interface) watch.Interface {
	d.Interface = w
	return d
}

func (d *watchdogged) stop() { d.timer.Stop() }

// Stop is called by the informer when it is done with the watch: when the server ended it, or
// the session ends.
func (d *watchdogged) Stop() {
	d.timer.Stop()
	d.Interface.Stop()
}
