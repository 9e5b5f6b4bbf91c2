package health

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/transport/fault"
)

// fleetFacts are the counters a board reads, as a test sets them: engines are names.
type fleetFacts struct {
	commits  map[string]uint64
	last     map[string]int64
	out      map[string]bool
	fpCommit map[uint64]time.Time
	alone    map[string]bool // engines with no other partner
}

func newFleetFacts() *fleetFacts {
	return &fleetFacts{commits: map[string]uint64{}, last: map[string]int64{}, out: map[string]bool{}, fpCommit: map[uint64]time.Time{},
		alone: map[string]bool{}}
}

func (f *fleetFacts) Commits(e string) uint64   { return f.commits[e] }
func (f *fleetFacts) LastCommit(e string) int64 { return f.last[e] }
func (f *fleetFacts) InPlacement(e string) bool { return !f.out[e] }
func (f *fleetFacts) OtherPartners(p, c string) bool {
	return !f.alone[p] && !f.alone[c]
}
func (f *fleetFacts) CommittedAfter(fp uint64, after time.Time) bool {
	t, ok := f.fpCommit[fp]
	return ok && t.After(after)
}
func (f *fleetFacts) FleetCommittedAfter(cut int64) bool {
	for _, l := range f.last {
		if l > cut {
			return true
		}
	}
	return false
}

// commit records a request committed on e at now.
func (f *fleetFacts) commit(now time.Time, engines ...string) {
	for _, e := range engines {
		f.commits[e]++
		f.last[e] = now.UnixNano()
	}
}

const window = 10 * time.Second

// decodeFail is a decode on consumer, reading producer's handoff ("" for a local decode), that
// timed out before its first token; prefillFail a prefill that failed with an engine error.
func decodeFail(consumer, producer string) Leg[string] {
	return Leg[string]{Engine: consumer, Phase: fault.PhaseDecode, Producer: producer, Partner: producer,
		Fault: &fault.Fault{Kind: fault.FirstTokenTimeout, Phase: fault.PhaseDecode, Engine: consumer}}
}

func prefillFail(engine string) Leg[string] {
	return Leg[string]{Engine: engine, Phase: fault.PhasePrefill,
		Fault: &fault.Fault{Kind: fault.Status, Status: 500, Phase: fault.PhasePrefill, Engine: engine}}
}

// event is one thing that happens to the board at t0 plus at: facts change, a report arrives,
// or the board looks again.
type event struct {
	at     time.Duration
	facts  func(f *fleetFacts, now time.Time)
	report *Report[string]
}

func report(at time.Duration, fp uint64, ends ...Leg[string]) event {
	return event{at: at, report: &Report[string]{FP: fp, Ends: ends}}
}

func facts(at time.Duration, fn func(f *fleetFacts, now time.Time)) event {
	return event{at: at, facts: fn}
}

func look(at time.Duration) event { return event{at: at} }

func (d Decision[E]) String() string {
	switch d.Verdict {
	case Count:
		return fmt.Sprintf("count %v", d.Leg.Engine)
	case Attribute:
		return fmt.Sprintf("request's %v", d.Leg.Engine)
	case Suspect:
		return fmt.Sprintf("suspect %v", d.Leg.Producer)
	case BlameProducer:
		return fmt.Sprintf("blame %v for %v", d.Leg.Producer, d.Leg.Engine)
	case BlamePair:
		return fmt.Sprintf("pair %v→%v", d.Leg.Producer, d.Leg.Engine)
	}
	return "?"
}

// Each blame rule as a story of reports, commits and looks, and every decision the board made.
func TestBoardRules(t *testing.T) {
	served := func(es ...string) event { // every engine named committed other requests at t0
		return facts(0, func(f *fleetFacts, now time.Time) { f.commit(now, es...) })
	}
	for _, tc := range []struct {
		name   string
		events []event
		want   []string
	}{
		{"a single failure is its engine's at once",
			[]event{served("d0"), report(time.Second, 1, prefillFail("p0"))},
			[]string{"count p0"}},
		{"the same request failing the same way on two engines that serve others is the request's",
			[]event{served("p0", "p1"), report(time.Second, 1, prefillFail("p0"), prefillFail("p1"))},
			[]string{"request's p0", "request's p1"}},
		{"a fleet that committed nothing in the window has no evidence to wait for",
			[]event{report(time.Second, 1, prefillFail("p0"), prefillFail("p1"))},
			[]string{"count p0", "count p1"}},
		{"a request that fails everywhere but committed elsewhere meanwhile is the engine's",
			[]event{served("p2"), facts(500*time.Millisecond, func(f *fleetFacts, now time.Time) { f.last["p0"] = 1; f.last["p1"] = 1 }),
				report(time.Second, 1, prefillFail("p0"), prefillFail("p1")),
				facts(2*time.Second, func(f *fleetFacts, now time.Time) { f.fpCommit[1] = now }), look(2 * time.Second)},
			[]string{"count p0", "count p1"}},
		{"sent again, failing on the same engine: held for the window, then the engine's",
			[]event{served("p0"), report(time.Second, 7, prefillFail("p0")), report(2*time.Second, 7, prefillFail("p0")),
				look(5 * time.Second), look(12 * time.Second)},
			[]string{"count p0", "count p0"}},
		{"sent again, then failing on another engine too: the request's",
			[]event{served("p0", "p1"), report(time.Second, 7, prefillFail("p0")), report(2*time.Second, 7, prefillFail("p0")),
				report(3*time.Second, 7, prefillFail("p1")), look(3 * time.Second)},
			[]string{"count p0", "request's p1", "request's p0"}},
		{"a producer whose handoffs fail on two consumers in placement is blamed",
			[]event{served("d0", "d2"), report(time.Second, 1, decodeFail("d0", "p0")), report(2*time.Second, 2, decodeFail("d2", "p0"))},
			[]string{"count d0", "suspect p0", "blame p0 for d2"}},
		// Issue 33, defect 4: d0 was already out; its failures are no evidence against p0, so the
		// sole producer is not blamed for d2's, which count against d2 once the window passes.
		{"a consumer already out is no evidence against its producer",
			[]event{served("d2"), report(time.Second, 1, decodeFail("d0", "p0")),
				facts(time.Second, func(f *fleetFacts, _ time.Time) { f.out["d0"] = true }),
				report(2*time.Second, 2, decodeFail("d2", "p0")), look(5 * time.Second), look(12 * time.Second)},
			[]string{"count d0", "count d2"}},
		{"a held handoff failure whose producer then commits elsewhere is the consumer's",
			[]event{served("d0"), report(time.Second, 1, decodeFail("d0", "p0")),
				report(2*time.Second, 2, decodeFail("d2", "p0")), // d2 has served nothing yet: held
				facts(2500*time.Millisecond, func(f *fleetFacts, _ time.Time) { f.out["d0"] = true }),
				facts(3*time.Second, func(f *fleetFacts, now time.Time) { f.commit(now, "p0") }), look(3 * time.Second)},
			[]string{"count d0", "suspect p0", "count d2"}},
		{"readable handoffs: a producer that committed since its first failed handoff is not suspected",
			[]event{served("d0", "d2"), report(time.Second, 1, decodeFail("d0", "p0")),
				facts(1500*time.Millisecond, func(f *fleetFacts, now time.Time) { f.commit(now, "p0") }),
				report(2*time.Second, 2, decodeFail("d2", "p0"))},
			[]string{"count d0", "count d2"}},
		// The pair rule (pairblame.go).
		{"the request then committed through another producer to the same consumer: the pair's at once",
			[]event{served("p0", "d0"), {at: time.Second, report: &Report[string]{FP: 1, Committed: true, Producer: "p1", Consumer: "d0",
				Ends: []Leg[string]{decodeFail("d0", "p0")}}}},
			[]string{"pair p0→d0"}},
		{"a retry on the same pair that commits: the consumer's (a transient failure)",
			[]event{served("p0", "d0"), {at: time.Second, report: &Report[string]{FP: 1, Committed: true, Producer: "p0", Consumer: "d0",
				Ends: []Leg[string]{decodeFail("d0", "p0")}}}},
			[]string{"count d0"}},
		{"the request committed through the same producer on another consumer: the pair's once the consumer commits",
			[]event{served("d0"), {at: time.Second, report: &Report[string]{FP: 1, Committed: true, Producer: "p0", Consumer: "d2",
				Ends: []Leg[string]{decodeFail("d0", "p0")}}},
				look(1500 * time.Millisecond), // held: d0 has not shown it serves since
				facts(2*time.Second, func(f *fleetFacts, now time.Time) { f.commit(now, "d0", "p1") }), look(2 * time.Second)},
			[]string{"pair p0→d0"}},
		{"a held handoff failure whose producer commits elsewhere, confined to the pair: the pair's",
			[]event{served("d0"), {at: time.Second, report: &Report[string]{FP: 1, Committed: true, Producer: "p1", Consumer: "d2",
				Ends: []Leg[string]{decodeFail("d0", "p0")}}},
				facts(2*time.Second, func(f *fleetFacts, now time.Time) { f.commit(now, "p0", "d2") }), look(2 * time.Second),
				facts(3*time.Second, func(f *fleetFacts, now time.Time) { f.commit(now, "d0", "p1") }), look(3 * time.Second)},
			[]string{"pair p0→d0"}},
		{"a consumer that then fails with another producer too is the consumer's",
			[]event{served("p0", "p1", "d0"), report(time.Second, 1, decodeFail("d0", "p0")),
				report(2*time.Second, 2, decodeFail("d0", "p1"))},
			[]string{"count d0", "count d0"}},
		// The first request failed on both cross pairs of an asymmetric fleet: alone it looks like
		// a request failing everywhere (no engine counts it), and so does a second that fails the
		// same; the third, committed on its third attempt, tells the pairs.
		{"a request committed after failing on pairs that failed before: the pairs'",
			[]event{served("p0", "p1", "d0", "d1"), report(time.Second, 1, decodeFail("d1", "p0"), decodeFail("d0", "p1")),
				report(1500*time.Millisecond, 2, decodeFail("d1", "p0"), decodeFail("d0", "p1")),
				{at: 2 * time.Second, report: &Report[string]{FP: 3, Committed: true, Producer: "p1", Consumer: "d1",
					Ends: []Leg[string]{decodeFail("d1", "p0"), decodeFail("d0", "p1")}}}},
			[]string{"request's d1", "request's d0", "request's d1", "request's d0", "pair p0→d1", "pair p1→d0"}},
		{"a request failing through one producer on several consumers is no pair's, whatever failed before",
			[]event{served("p0", "d0", "d1", "d2"), report(time.Second, 1, decodeFail("d1", "p0")),
				report(1500*time.Millisecond, 2, decodeFail("d0", "p0"), decodeFail("d1", "p0"), decodeFail("d2", "p0"))},
			[]string{"count d1", "request's d0", "request's d1", "request's d2"}}, // d1's first failure is no evidence against the second's request
		{"one pair alone cannot be told from its engines: a second request failing on it is the consumer's",
			[]event{served("p0", "d0"), facts(0, func(f *fleetFacts, _ time.Time) { f.alone["d0"] = true }),
				report(time.Second, 1, decodeFail("d0", "p0")), report(1500*time.Millisecond, 2, decodeFail("d0", "p0"))},
			[]string{"count d0", "count d0"}},
		{"a consumer that never commits is counted when the window passes",
			[]event{served("p0", "d0"), {at: time.Second, report: &Report[string]{FP: 1, Committed: true, Producer: "p0", Consumer: "d2",
				Ends: []Leg[string]{decodeFail("d0", "p0")}}}, look(5 * time.Second), look(11 * time.Second)},
			[]string{"count d0"}},
		// A request failing everywhere, whatever each engine made of it (poison_test.go plays
		// these in every order).
		{"a request failing on two engines in different ways is the request's",
			[]event{served("d0", "d1"), report(time.Second, 1, failedDecode("d0", "p0", fault.StreamError),
				failedDecode("d1", "p1", fault.FirstTokenTimeout))},
			[]string{"request's d0", "request's d1"}},
		{"an engine failing healthy requests is still counted while poisons visit it",
			[]event{served("p0", "d0", "d1", "d2"),
				{at: time.Second, report: &Report[string]{FP: 100, Committed: true, Producer: "p1", Consumer: "d0",
					Ends: []Leg[string]{failedDecode("d1", "p0", fault.ClosedEarly)}}},
				report(1500*time.Millisecond, 1, decodeFail("d1", "p0"), decodeFail("d2", "p1"), decodeFail("d0", "p0")),
				facts(1800*time.Millisecond, func(f *fleetFacts, now time.Time) { f.commit(now, "p0", "p1", "d0", "d2") }),
				{at: 2 * time.Second, report: &Report[string]{FP: 101, Committed: true, Producer: "p0", Consumer: "d2",
					Ends: []Leg[string]{failedDecode("d1", "p1", fault.ClosedEarly)}}}},
			[]string{"count d1", "request's d1", "request's d2", "request's d0", "count d1"}},
		{"a fleet that served until a moment ago, then fails every request: counted once the window passed",
			[]event{served("d0", "d1"), report(time.Second, 1, decodeFail("d0", "p0"), decodeFail("d1", "p0")),
				report(11*time.Second, 2, decodeFail("d0", "p0"), decodeFail("d1", "p0"))},
			[]string{"request's d0", "request's d1", "count d0", "count d1"}},
		{"an engine that never served waits for its first commit, and is counted without one",
			[]event{served("p0", "d0"), report(time.Second, 1, decodeFail("d0", "p0"), decodeFail("d2", "p0")),
				look(5 * time.Second), look(11 * time.Second)},
			[]string{"request's d0", "count d2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleetFacts()
			b := NewBoard[string](f)
			var got []string
			for _, e := range tc.events {
				now := t0.Add(e.at)
				var ds []Decision[string]
				switch {
				case e.facts != nil:
					e.facts(f, now)
					continue
				case e.report != nil:
					ds = b.Report(*e.report, now, window)
				default:
					ds = b.Evaluate(now, window)
				}
				for _, d := range ds {
					got = append(got, d.String())
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("decisions %q, want %q", got, tc.want)
			}
		})
	}
}

// What a leg's end tells its breaker.
func TestLegNews(t *testing.T) {
	ok := Leg[string]{Engine: "d0", Phase: fault.PhaseDecode, Partner: "p0"}
	failed := decodeFail("d0", "p0")
	client := Leg[string]{Engine: "d0", Phase: fault.PhaseDecode, Fault: &fault.Fault{Kind: fault.Rejected, Status: 400}}
	neutral := failed
	neutral.Neutral = true
	for _, tc := range []struct {
		name                          string
		l                             Leg[string]
		streaking, requestsFault, fen bool
		want                          bool
		note                          string
	}{
		{"a success with no streak says nothing", ok, false, false, false, false, ""},
		{"a success resets a streak", ok, true, false, false, true, ""},
		{"a counted failure", failed, false, false, false, true, "first_token_timeout on the decode leg (partner p0)"},
		{"the request's own failure", failed, false, true, false, false, ""},
		{"a failure while the node is fenced", failed, false, false, true, false, ""},
		{"a neutral end", neutral, true, false, false, false, ""},
		{"a fault the table does not count", client, true, false, false, false, ""},
	} {
		m, got := tc.l.News(tc.streaking, tc.requestsFault, tc.fen)
		if got != tc.want || m.Note != tc.note || (got && m.Failed != (tc.l.Fault != nil)) {
			t.Errorf("%s: %+v %v", tc.name, m, got)
		}
	}
	if m, ok := HandoffNews(failed, "d0", false); !ok || !m.Failed || m.Note != "its handoff failed on consumer d0 (first_token_timeout on the decode leg)" {
		t.Errorf("handoff news: %+v %v", m, ok)
	}
}
