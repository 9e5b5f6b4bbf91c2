package kv

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The trust policy, row by row: when a plan asks first, uses its answer, or rechecks it while
// the attempt runs.
func TestJudgeAnswer(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	p := bootstrapPolicy{recheckAfter: 2 * time.Second, maxAge: time.Minute}
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	fresh := answerState{cached: true, answered: true, confirmed: ago(time.Second), checked: ago(time.Second)}
	with := func(f func(*answerState)) answerState { s := fresh; f(&s); return s }
	for _, tc := range []struct {
		name   string
		state  answerState
		policy bootstrapPolicy
		want   answerUse
	}{
		{"never asked", answerState{}, p, askFirst},
		{"the first query is under way", answerState{cached: true}, p, awaitAnswer},
		{"confirmed a second ago", fresh, p, useAnswer},
		{"the query failed", with(func(s *answerState) { s.failed = true }), p, askFirst},
		{"an attempt through the producer failed", with(func(s *answerState) { s.forgotten = true }), p, askFirst},
		{"older than a minute", with(func(s *answerState) { s.confirmed, s.checked = ago(61*time.Second), ago(61*time.Second) }), p, askFirst},
		{"idle for the bound", with(func(s *answerState) { s.confirmed, s.checked = ago(2*time.Second), ago(2*time.Second) }), p, startRecheck},
		{"idle for ten seconds", with(func(s *answerState) { s.confirmed, s.checked = ago(10*time.Second), ago(10*time.Second) }), p, startRecheck},
		{"a recheck under way", with(func(s *answerState) { s.confirmed, s.rechecking = ago(10*time.Second), true }), p, joinRecheck},
		{"a recheck failed lately", with(func(s *answerState) { s.confirmed, s.checked = ago(10*time.Second), ago(time.Second) }), p, useAnswer},
		{"a recheck failed a bound ago", with(func(s *answerState) { s.confirmed, s.checked = ago(10*time.Second), ago(2*time.Second) }), p, startRecheck},
		{"forgotten while rechecking", with(func(s *answerState) { s.forgotten, s.rechecking = true, true }), p, askFirst},
		{"a bound of 0 rechecks every plan", fresh, bootstrapPolicy{maxAge: time.Minute}, startRecheck},
		{"a bound of 0 joins a recheck under way", with(func(s *answerState) { s.rechecking = true }), bootstrapPolicy{maxAge: time.Minute}, joinRecheck},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := judgeAnswer(tc.state, now, tc.policy); got != tc.want {
				t.Fatalf("got %d, want %d", got, tc.want)
			}
		})
	}
}

// fakeBootstrap is a bootstrap server behind an http.RoundTripper (no socket): it answers the
// engine ids it holds, or fails, and counts the queries.
type fakeBootstrap struct {
	mu      sync.Mutex
	ids     []string
	down    bool
	queries int
}

func (f *fakeBootstrap) set(down bool, ids ...string) {
	f.mu.Lock()
	f.ids, f.down = ids, down
	f.mu.Unlock()
}

func (f *fakeBootstrap) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.queries
}

func (f *fakeBootstrap) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries++
	if f.down {
		return nil, errors.New("connection refused")
	}
	var b strings.Builder
	b.WriteString("{")
	for i, id := range f.ids {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"` + string(rune('0'+i)) + `":{"engine_id":"` + id + `"}`)
	}
	b.WriteString("}")
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(b.String())), Request: r}, nil
}

// events records what a BootstrapObserver hears.
type events struct {
	mu        sync.Mutex
	rechecks  []string
	restarted [][]string
}

func (e *events) Rechecked(_, result string, _ error) {
	e.mu.Lock()
	e.rechecks = append(e.rechecks, result)
	e.mu.Unlock()
}

func (e *events) Restarted(_, _ string, _, after []string) {
	e.mu.Lock()
	e.restarted = append(e.restarted, after)
	e.mu.Unlock()
}

func (e *events) seen() (rechecks []string, restarts int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.rechecks), len(e.restarted)
}

// A plan on an answer idle past the bound starts one recheck and watches it; plans meanwhile
// join it; a changed id ends the watchers of that rank only; the cache then holds the new
// answer, confirmed, so the next plans within the bound ask nothing. The clock is the test's.
func TestRecheckFindsARestartedProducer(t *testing.T) {
	srv := &fakeBootstrap{}
	srv.set(false, "a0", "a1")
	obs := &events{}
	now := time.Unix(1_000_000, 0)
	m := newMooncake()
	m.ids.client = &http.Client{Transport: srv}
	m.ids.now = func() time.Time { return now }
	m.observe(obs)
	plan := func(rank int) Transfer {
		t.Helper()
		a := Attempt{Pair: mooncakePair(Side{Host: "127.0.0.1", Endpoint: "127.0.0.1:8998"}), BackendRequestID: "r", ProducerRank: rank}
		tr, err := m.PlanContext(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	watch := func(tr Transfer) <-chan struct{} {
		gone := make(chan struct{})
		tr.Recheck.AfterGone(func() { close(gone) })
		return gone
	}

	if tr := plan(0); tr.Recheck.r != nil || srv.count() != 1 {
		t.Fatalf("the first plan: recheck %v, %d queries; want a plain query", tr.Recheck.r, srv.count())
	}
	now = now.Add(time.Second)
	if tr := plan(0); tr.Recheck.r != nil || srv.count() != 1 {
		t.Fatal("an answer a second old was rechecked")
	}

	// Idle past the bound; the producer restarted meanwhile, and the recheck is held up until
	// the three plans below are made.
	now = now.Add(DefaultRecheckAfter)
	srv.mu.Lock()
	srv.ids = []string{"b0", "b1"}
	first := plan(0)
	second, other := plan(0), plan(1)
	srv.mu.Unlock()
	if first.Recheck.r == nil || second.Recheck.r != first.Recheck.r || other.Recheck.r != first.Recheck.r {
		t.Fatal("the plans made while one recheck ran do not all watch it")
	}
	if !strings.Contains(string(first.Decode), `"a0"`) {
		t.Fatalf("the plan did not go ahead on the cached id: %s", first.Decode)
	}
	gone1, gone2, goneOther := watch(first), watch(second), watch(other)
	<-gone1
	<-gone2
	<-goneOther
	if srv.count() != 2 {
		t.Fatalf("%d queries, want one recheck", srv.count())
	}
	if tr := plan(0); tr.Recheck.r != nil || !strings.Contains(string(tr.Decode), `"b0"`) {
		t.Fatalf("after the recheck: %s, recheck %v; want the new id, trusted", tr.Decode, tr.Recheck.r)
	}
	if rechecks, restarts := obs.seen(); !slices.Equal(rechecks, []string{RecheckChanged}) || restarts != 1 {
		t.Fatalf("observer heard rechecks %v and %d restarts, want one change", rechecks, restarts)
	}

	// Idle again, the same producer: the recheck confirms it and ends nobody.
	now = now.Add(DefaultRecheckAfter)
	tr := plan(1)
	fired := watch(tr)
	<-tr.Recheck.r.ended.Done()
	if tr := plan(1); tr.Recheck.r != nil {
		t.Fatal("a confirmed answer was rechecked again within the bound")
	}
	select {
	case <-fired:
		t.Fatal("a confirmed id ended the attempt")
	default:
	}
	if rechecks, restarts := obs.seen(); !slices.Equal(rechecks, []string{RecheckChanged, RecheckConfirmed}) || restarts != 1 {
		t.Fatalf("observer heard rechecks %v and %d restarts", rechecks, restarts)
	}
}

// A recheck the server does not answer ends no attempt and keeps the answer in use, and the
// next one waits for another bound: a producer whose bootstrap server is down is not asked on
// every request.
func TestAFailedRecheckKeepsTheAnswerAndWaitsABound(t *testing.T) {
	srv := &fakeBootstrap{}
	srv.set(false, "a0")
	obs := &events{}
	now := time.Unix(1_000_000, 0)
	c := newBootstrapCache()
	c.client, c.now = &http.Client{Transport: srv}, func() time.Time { return now }
	c.observe(obs)
	if _, _, err := c.get(context.Background(), "h:1", "p0"); err != nil {
		t.Fatal(err)
	}
	now = now.Add(DefaultRecheckAfter)
	srv.set(true)
	ids, r, err := c.get(context.Background(), "h:1", "p0")
	if err != nil || r == nil || !slices.Equal(ids, []string{"a0"}) {
		t.Fatalf("%v, %v, %v: want the cached id under recheck", ids, r, err)
	}
	fired := make(chan struct{}, 1)
	IdentityCheck{r: r, id: "a0"}.AfterGone(func() { fired <- struct{}{} })
	<-r.ended.Done()
	now = now.Add(time.Second)
	if ids, r2, err := c.get(context.Background(), "h:1", "p0"); err != nil || r2 != nil || !slices.Equal(ids, []string{"a0"}) {
		t.Fatalf("a second after the failed recheck: %v, %v, %v; want the cached id, no query", ids, r2, err)
	}
	now = now.Add(DefaultRecheckAfter)
	srv.set(false, "a0")
	if _, r3, _ := c.get(context.Background(), "h:1", "p0"); r3 == nil {
		t.Fatal("no recheck a bound after the failed one")
	} else {
		<-r3.ended.Done()
	}
	select {
	case <-fired:
		t.Fatal("a failed recheck ended the attempt")
	default:
	}
	if rechecks, _ := obs.seen(); !slices.Equal(rechecks, []string{RecheckFailed, RecheckConfirmed}) || srv.count() != 3 {
		t.Fatalf("rechecks %v in %d queries", rechecks, srv.count())
	}
}

// After an attempt failed (Forget), the next plan asks first, and a different answer is a
// restart reported once, even when the server failed in between.
func TestForgetAsksFirstAndReportsARestartOnce(t *testing.T) {
	srv := &fakeBootstrap{}
	srv.set(false, "a0")
	obs := &events{}
	c := newBootstrapCache()
	c.client = &http.Client{Transport: srv}
	c.observe(obs)
	ask := func() ([]string, error) {
		ids, r, err := c.get(context.Background(), "h:1", "p0")
		if r != nil {
			t.Fatal("a plan right after a query was rechecked")
		}
		return ids, err
	}
	if _, err := ask(); err != nil {
		t.Fatal(err)
	}
	c.forget("h:1")
	srv.set(true)
	if _, err := ask(); !errors.Is(err, errBootstrap) {
		t.Fatalf("a server down: %v", err)
	}
	srv.set(false, "b0")
	if ids, err := ask(); err != nil || !slices.Equal(ids, []string{"b0"}) {
		t.Fatalf("%v, %v", ids, err)
	}
	c.forget("h:1")
	if _, err := ask(); err != nil {
		t.Fatal(err)
	}
	if _, restarts := obs.seen(); restarts != 1 || srv.count() != 4 {
		t.Fatalf("%d restarts in %d queries, want 1 in 4", restarts, srv.count())
	}
}

// The request path of a plan on a trusted answer: a lock, the policy's timestamp compares and
// the legs' parameters; no query, no watch.
func BenchmarkMooncakePlanOnATrustedAnswer(b *testing.B) {
	srv := &fakeBootstrap{}
	srv.set(false, "a0")
	now := time.Unix(1_000_000, 0)
	m := newMooncake()
	m.ids.client, m.ids.now = &http.Client{Transport: srv}, func() time.Time { return now }
	a := Attempt{Pair: mooncakePair(Side{Host: "127.0.0.1", Endpoint: "127.0.0.1:8998"}), BackendRequestID: "r"}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if tr, err := m.PlanContext(ctx, a); err != nil || tr.Recheck.r != nil {
			b.Fatal(err)
		}
	}
	if srv.count() != 1 {
		b.Fatalf("%d queries", srv.count())
	}
}
