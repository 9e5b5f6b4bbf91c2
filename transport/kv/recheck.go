package kv

import (
	"context"
	"time"
)

// When the router trusts a producer's cached bootstrap answer, and when it asks again.
//
// A producer that restarts gets new engine ids. Under traffic the restart shows at once: the
// attempts through the producer fail, and the first failure drops the answer (Forget). A
// producer that restarts while idle fails nothing, so the next attempt would hand its consumer
// the old id; vLLM's consumer then cannot find the producer's workers and waits for KV that
// never comes, until a timeout blames the consumer. So an attempt planned on an answer the
// server has not confirmed for RecheckAfter has it asked again while the attempt runs, off the
// critical path: the legs start at once on the cached id, and if the server now lists another
// id for the attempt's rank, the attempt ends at once (Transfer.Recheck) and its retry is
// planned on the new answer. Under steady traffic this is one query per producer per
// RecheckAfter (a confirmed answer is trusted again for as long), and one query per attempt
// after an idle spell; the request path reads one timestamp.

// Bounds of trust in a cached answer.
const (
	// DefaultRecheckAfter is how long a confirmed answer is trusted without a recheck: far
	// shorter than any vLLM restart (the model alone takes longer to load), so that a restart
	// while idle is always noticed by the first attempt after it, and long enough that steady
	// traffic costs a query every few seconds at most.
	DefaultRecheckAfter = 2 * time.Second
	// bootstrapMaxAge is how long an answer is used at all: an older one is asked again before
	// the attempt is planned.
	bootstrapMaxAge = time.Minute
)

// bootstrapPolicy is the trust a cache puts in its answers.
type bootstrapPolicy struct {
	recheckAfter, maxAge time.Duration
}

// answerState is what judgeAnswer reads of a producer's cached answer.
type answerState struct {
	// cached: an answer is held or being asked for; answered: its query ended, failed if with
	// an error; forgotten: an attempt through the producer failed since.
	cached, answered, failed, forgotten bool
	// confirmed is when the server last gave the answer (its query, or a recheck that found
	// it unchanged); checked when the last recheck started.
	confirmed, checked time.Time
	// rechecking: a recheck is under way.
	rechecking bool
}

// answerUse is what an attempt's plan does with a producer's cached answer.
type answerUse uint8

const (
	// askFirst: no answer to use (never asked, failed, forgotten, or older than maxAge): ask
	// the server and wait for its answer.
	askFirst answerUse = iota
	// awaitAnswer: a query is under way: wait for its answer.
	awaitAnswer
	// useAnswer: confirmed lately: plan on it.
	useAnswer
	// startRecheck: plan on it and ask the server again while the attempt runs.
	startRecheck
	// joinRecheck: plan on it; a recheck under way says whether it still holds.
	joinRecheck
)

// judgeAnswer is the policy: what a plan at now does with an answer in state s.
func judgeAnswer(s answerState, now time.Time, p bootstrapPolicy) answerUse {
	switch {
	case !s.cached:
		return askFirst
	case !s.answered:
		return awaitAnswer
	case s.failed, s.forgotten, now.Sub(s.confirmed) > p.maxAge:
		return askFirst
	case s.rechecking:
		return joinRecheck
	case now.Sub(s.confirmed) >= p.recheckAfter && now.Sub(s.checked) >= p.recheckAfter:
		// A recheck that failed (the server did not answer) is not repeated before another
		// RecheckAfter: at most one query per bound, whatever the server does.
		return startRecheck
	}
	return useAnswer
}

// Results of a recheck, as BootstrapObserver hears them.
const (
	RecheckConfirmed = "confirmed" // the server lists the same engine ids
	RecheckChanged   = "changed"   // other engine ids: the producer restarted
	RecheckFailed    = "failed"    // the server did not answer, or answered nonsense
)

// BootstrapObserver hears what the Mooncake connector learns from producers' bootstrap
// servers, from the goroutine that asked, never on a request's path. The composition root
// (node) counts and logs it.
type BootstrapObserver interface {
	// Rechecked reports one recheck of producer's answer: RecheckConfirmed, RecheckChanged or
	// RecheckFailed (err says why).
	Rechecked(producer, result string, err error)
	// Restarted reports, once per change, a producer whose bootstrap server at addr lists other
	// engine ids (by data-parallel rank) than it did.
	Restarted(producer, addr string, before, after []string)
}

// recheck is one query of a producer's bootstrap server made while attempts planned on its
// earlier answer run.
type recheck struct {
	// ended is done once the query ended; ids is its answer (nil if it failed), written
	// before.
	ended context.Context
	end   context.CancelFunc
	ids   []string
}

func newRecheck() *recheck {
	r := &recheck{}
	r.ended, r.end = context.WithCancel(context.Background())
	return r
}

// IdentityCheck is a recheck of the producer identity an attempt was planned with: the engine
// id of one data-parallel rank, from a cached answer of the producer's bootstrap server that
// is being asked again while the attempt runs. The zero value checks nothing.
type IdentityCheck struct {
	r    *recheck
	rank int
	id   string
}

// AfterGone arranges for gone to run, on a goroutine of its own, once the recheck found that
// the producer's bootstrap server no longer lists the id at the rank: the producer restarted,
// and a consumer handed the id would wait for KV that never comes. gone does not run if the
// recheck confirmed the id or failed. stop ends the watch; after it returns false, gone may
// be running or have run, so the caller settles the race itself. The zero IdentityCheck never
// calls gone.
func (c IdentityCheck) AfterGone(gone func()) (stop func() bool) {
	if c.r == nil {
		return neverStarted
	}
	return context.AfterFunc(c.r.ended, func() {
		if ids := c.r.ids; ids != nil && (c.rank >= len(ids) || ids[c.rank] != c.id) {
			gone()
		}
	})
}

func neverStarted() bool { return true }

// MooncakeOption adjusts a Mooncake connector made by NewMooncake.
type MooncakeOption func(*mooncakeConnector)

// RecheckAfter sets how long a confirmed bootstrap answer is trusted without a recheck
// (DefaultRecheckAfter); 0 rechecks the answer of every attempt, one query at a time per
// producer.
func RecheckAfter(d time.Duration) MooncakeOption {
	return func(m *mooncakeConnector) { m.ids.policy.recheckAfter = max(d, 0) }
}
