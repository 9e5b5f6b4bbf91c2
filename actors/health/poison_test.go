package health

import (
	"fmt"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/transport/fault"
)

// A poison request fails on every engine it is tried on, because of itself. However its
// failures reach the board — reports in any order, close together or spread over the window, the
// board looking between them or not, the last commits before them or after — none of them may
// reach an engine's breaker (Count), a producer's (BlameProducer, Suspect) or a pair's
// (BlamePair): each is decided once, as the request's (Attribute).
//
// The scenarios are the ones a soak of mixed traffic on a loaded machine produced
// (tests/poison_test.go): a slow engine times out a poison that fails outright elsewhere,
// poisons are the last requests an engine sees, a healthy request timed out on the same
// consumer or pair just before.

// failedDecode is a decode on consumer, reading producer's handoff, that failed with kind.
func failedDecode(consumer, producer string, kind fault.Kind) Leg[string] {
	f := &fault.Fault{Kind: kind, Phase: fault.PhaseDecode, Engine: consumer}
	if kind == fault.StreamError || kind == fault.Status {
		f.Status = 500
	}
	return Leg[string]{Engine: consumer, Phase: fault.PhaseDecode, Producer: producer, Partner: producer, Fault: f}
}

// soakStep is one thing the fleet does: a request's report reaches the board, or engines commit
// a healthy request.
type soakStep struct {
	report *Report[string]
	commit []string
}

// poisoned is the report of a poison request (it never commits) whose attempts failed on ends.
func poisoned(fp uint64, ends ...Leg[string]) soakStep {
	return soakStep{report: &Report[string]{FP: fp, Ends: ends}}
}

// healed is the report of a healthy request that failed on ends, then committed through
// producer to consumer.
func healed(fp uint64, producer, consumer string, ends ...Leg[string]) soakStep {
	return soakStep{report: &Report[string]{FP: fp, Committed: true, Producer: producer, Consumer: consumer, Ends: ends}}
}

func commits(engines ...string) soakStep { return soakStep{commit: engines} }

func (s soakStep) String() string {
	if s.report == nil {
		return fmt.Sprintf("commit %v", s.commit)
	}
	return fmt.Sprintf("report %d", s.report.FP)
}

func TestBoardNeverBlamesAnEngineForAPoisonRequest(t *testing.T) {
	const (
		ftt  = fault.FirstTokenTimeout
		ce   = fault.ClosedEarly
		dbt  = fault.DoneBeforeToken
		serr = fault.StreamError
		win  = time.Second // the tests' recovery.blame_window_s
	)
	fleet := []string{"p0", "p1", "d0", "d1", "d2"}
	for _, sc := range []struct {
		name  string
		steps []soakStep
	}{
		{"a slow consumer times out a poison that fails outright elsewhere", []soakStep{
			poisoned(1, failedDecode("d1", "p0", serr), failedDecode("d0", "p1", serr), failedDecode("d2", "p0", ftt)),
			commits("p0", "d0"),
		}},
		{"poisons of three kinds are the last requests the consumers see", []soakStep{
			poisoned(1, failedDecode("d1", "p1", ftt), failedDecode("d0", "p0", ftt), failedDecode("d2", "p1", ftt)),
			poisoned(2, failedDecode("d1", "p1", ce), failedDecode("d2", "p0", ce), failedDecode("d0", "p1", ce)),
			poisoned(3, failedDecode("d0", "p0", dbt), failedDecode("d1", "p1", dbt), failedDecode("d2", "p0", dbt)),
		}},
		{"a healthy request timed out on the consumer before the poisons", []soakStep{
			healed(100, "p0", "d0", failedDecode("d1", "p1", ftt)),
			poisoned(2, failedDecode("d1", "p1", ce), failedDecode("d2", "p0", ce), failedDecode("d0", "p1", ce)),
			poisoned(3, failedDecode("d0", "p0", dbt), failedDecode("d1", "p1", dbt), failedDecode("d2", "p0", dbt)),
		}},
		{"a healthy request timed out on the poison's pair, then read another producer's handoff", []soakStep{
			healed(100, "p0", "d1", failedDecode("d1", "p1", ftt)),
			poisoned(1, failedDecode("d1", "p1", ftt), failedDecode("d0", "p0", dbt), failedDecode("d2", "p0", dbt)),
			commits("p1", "d2"),
		}},
		{"a poison sent again, its attempts on other pairs", []soakStep{
			poisoned(1, failedDecode("d0", "p0", ce), failedDecode("d1", "p1", ce)),
			poisoned(1, failedDecode("d1", "p0", ce), failedDecode("d2", "p1", ftt)),
			commits("p1", "d1"),
			poisoned(1, failedDecode("d2", "p1", ce), failedDecode("d0", "p0", ce)),
		}},
		{"a poison that met the same consumer twice", []soakStep{
			poisoned(1, failedDecode("d1", "p0", dbt), failedDecode("d1", "p1", dbt), failedDecode("d0", "p0", dbt)),
			poisoned(2, failedDecode("d1", "p1", ce), failedDecode("d0", "p0", ce), failedDecode("d2", "p1", ce)),
		}},
		{"poisons of the prefill and of the decode", []soakStep{
			poisoned(1, prefillFail("p0"), prefillFail("p1"), prefillFail("p0")),
			poisoned(2, failedDecode("d2", "p1", ftt), failedDecode("d1", "p0", ftt), failedDecode("d0", "p1", ftt)),
			commits("p0", "d1"),
		}},
	} {
		t.Run(sc.name, func(t *testing.T) { poisonNeverBlamed(t, sc.steps, fleet, win) })
	}
}

// poisonNeverBlamed plays steps in every order, close together or spread over the window, with
// the board looking between them or not, and fails at the first poison failure that reaches a
// breaker or is not decided exactly once.
func poisonNeverBlamed(t *testing.T, steps []soakStep, fleet []string, win time.Duration) {
	poison := map[*fault.Fault]bool{} // the poisons' legs, by their fault's identity
	for _, s := range steps {
		if s.report != nil && !s.report.Committed {
			for _, l := range s.report.Ends {
				poison[l.Fault] = true
			}
		}
	}
	for _, order := range permutations(len(steps)) {
		for _, gap := range []time.Duration{0, boardTickEvery, win / 8} {
			for _, looks := range []bool{false, true} {
				decided, blamed := playSoak(steps, order, gap, looks, fleet, win, poison)
				name := fmt.Sprintf("order %v, %v apart, looking between: %v", order, gap, looks)
				if blamed != nil {
					t.Fatalf("%s: a poison's failure reached a breaker: %v", name, *blamed)
				}
				for l := range poison {
					if decided[l] != 1 {
						t.Fatalf("%s: a poison's failure on %s was decided %d times, want once", name, l.Engine, decided[l])
					}
				}
			}
		}
	}
}

// playSoak plays steps in order, gap apart, on a fleet that served before, then lets the window
// pass with no traffic. It returns how many times each poison leg was decided, and the first
// decision that blamed one on something other than its request.
func playSoak(steps []soakStep, order []int, gap time.Duration, looks bool, fleet []string, win time.Duration,
	poison map[*fault.Fault]bool) (decided map[*fault.Fault]int, blamed *Decision[string]) {
	f := newFleetFacts()
	f.commit(t0, fleet...)
	b := NewBoard[string](f)
	decided = map[*fault.Fault]int{}
	check := func(ds []Decision[string]) {
		for _, d := range ds {
			if poison[d.Leg.Fault] {
				decided[d.Leg.Fault]++
				if d.Verdict != Attribute && blamed == nil {
					blamed = &d
				}
			}
		}
	}
	now := t0.Add(boardTickEvery)
	for _, i := range order {
		now = now.Add(gap)
		if s := steps[i]; s.report != nil {
			check(b.Report(*s.report, now, win))
		} else {
			f.commit(now, s.commit...)
		}
		if looks {
			check(b.Evaluate(now.Add(gap/2), win))
		}
	}
	// The traffic stops; the board's timer fires as the window passes, and after.
	check(b.Evaluate(now.Add(win), win))
	check(b.Evaluate(now.Add(2*win), win))
	return decided, blamed
}

// boardTickEvery is how often the board's actor has it look again while it holds failures
// (actors/blameboard.go).
const boardTickEvery = 50 * time.Millisecond

// permutations lists every order of n steps.
func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{nil}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append(make([]int, 0, n), p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	return out
}
