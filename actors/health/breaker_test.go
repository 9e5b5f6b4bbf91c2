package health

import (
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
)

// recovery is eject_after 3, probes every 1 s backing off to 4 s, no quarantine.
func recovery(quarantine time.Duration) config.RecoveryRuntime {
	return config.RecoveryRuntime{EjectAfter: 3, ProbeInterval: time.Second, ProbeMaxInterval: 4 * time.Second,
		FailureQuarantine: quarantine}
}

// admitted is the breaker of an engine whose join check passed.
func admitted(cfg config.RecoveryRuntime) Breaker {
	b := NewBreaker(cfg)
	b.Joined()
	return b
}

// t0 is the test's clock: every decision takes the time it is given.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// step is one event the engine actor hands its breaker, at t0 plus at.
type step struct {
	at   time.Duration
	do   func(b *Breaker, now time.Time)
	name string
}

func fail(partner string) step {
	return step{name: "failure", do: func(b *Breaker, now time.Time) {
		b.Note("engine_status on the decode leg")
		b.Failure(now, partner)
	}}
}

func at(d time.Duration, s step) step { s.at = d; return s }

var (
	success      = step{name: "success", do: func(b *Breaker, _ time.Time) { b.Success() }}
	probeStarted = step{name: "probe started", do: func(b *Breaker, _ time.Time) { b.ProbeStarted() }}
	probeFailed  = step{name: "probe failed", do: func(b *Breaker, now time.Time) { b.ProbeFailed(now) }}
	probePassed  = step{name: "probe passed", do: func(b *Breaker, _ time.Time) { b.ProbeSucceeded() }}
	inconclusive = step{name: "probe inconclusive", do: func(b *Breaker, now time.Time) { b.ProbeInconclusive(now) }}
	quarOver     = step{name: "quarantine timer", do: func(b *Breaker, now time.Time) { b.QuarantineOver(now) }}
	adminEject   = step{name: "admin eject", do: func(b *Breaker, now time.Time) { b.EjectByAdmin(now, "maintenance") }}
	lift         = step{name: "admin lifts quarantine", do: func(b *Breaker, _ time.Time) { b.LiftQuarantine() }}
	peerReadmit  = step{name: "peer readmits", do: func(b *Breaker, _ time.Time) { b.Readmitted() }}
)

func peerQuarantine(until time.Duration) step {
	return step{name: "peer quarantine", do: func(b *Breaker, _ time.Time) { b.Quarantine(t0.Add(until)) }}
}

// The breaker's rules, each as the sequence of events that shows it and where the engine then
// stands: a streak ejects at eject_after, a success resets it, a quarantine lasts its time,
// failed probes back off to the maximum, an inconclusive one keeps the cadence, an operator's
// ejection schedules no probe, a joining engine is deaf to failures.
func TestBreakerRules(t *testing.T) {
	type want struct {
		state          State
		streak         int
		nextProbe      time.Duration // from t0; -1: none scheduled
		quarantineEnds time.Duration // from t0; -1: none
		partner        string
		ejectedBy      string
		takesOut       bool
	}
	for _, tc := range []struct {
		name       string
		quarantine time.Duration
		joining    bool
		steps      []step
		want       want
	}{
		{name: "two failures stay admitted", steps: []step{fail(""), fail("")},
			want: want{state: Admitted, streak: 2, nextProbe: -1, quarantineEnds: -1, takesOut: true}},
		{name: "a success resets the streak", steps: []step{fail(""), fail(""), success, fail("")},
			want: want{state: Admitted, streak: 1, nextProbe: -1, quarantineEnds: -1}},
		{name: "the third failure ejects, partner kept", steps: []step{fail(""), fail(""), at(2*time.Second, fail("p1"))},
			want: want{state: Ejected, streak: 3, nextProbe: 3 * time.Second, quarantineEnds: -1, partner: "p1", ejectedBy: "breaker", takesOut: true}},
		{name: "an ejected engine counts no more", steps: []step{fail(""), fail(""), fail(""), fail("p2")},
			want: want{state: Ejected, streak: 3, nextProbe: time.Second, quarantineEnds: -1, ejectedBy: "breaker", takesOut: true}},
		{name: "a quarantine after any failure", quarantine: 2 * time.Second, steps: []step{fail("")},
			want: want{state: Quarantined, streak: 1, nextProbe: -1, quarantineEnds: 2 * time.Second, takesOut: true}},
		{name: "a quarantine does not end early", quarantine: 2 * time.Second, steps: []step{fail(""), at(time.Second, quarOver)},
			want: want{state: Quarantined, streak: 1, nextProbe: -1, quarantineEnds: 2 * time.Second, takesOut: true}},
		{name: "a quarantine ends on time, the streak kept", quarantine: 2 * time.Second, steps: []step{fail(""), at(2*time.Second, quarOver)},
			want: want{state: Admitted, streak: 1, nextProbe: -1, quarantineEnds: -1, takesOut: true}},
		{name: "failed probes back off to the maximum",
			steps: []step{fail(""), fail(""), fail(""), probeStarted, probeFailed, probeStarted, probeFailed, probeStarted, probeFailed},
			want:  want{state: Ejected, streak: 3, nextProbe: 4 * time.Second, quarantineEnds: -1, ejectedBy: "breaker", takesOut: true}},
		{name: "an inconclusive probe keeps the cadence",
			steps: []step{fail(""), fail(""), fail(""), probeStarted, probeFailed, probeStarted, at(10*time.Second, inconclusive)},
			want:  want{state: Ejected, streak: 3, nextProbe: 12 * time.Second, quarantineEnds: -1, ejectedBy: "breaker", takesOut: true}},
		{name: "a probe in flight", steps: []step{fail(""), fail(""), fail(""), probeStarted},
			want: want{state: Probing, streak: 3, nextProbe: time.Second, quarantineEnds: -1, ejectedBy: "breaker", takesOut: true}},
		{name: "a passed probe readmits with a clean streak",
			steps: []step{fail(""), fail(""), fail("p1"), probeStarted, probeFailed, probeStarted, probePassed},
			want:  want{state: Admitted, nextProbe: -1, quarantineEnds: -1}},
		{name: "an operator's ejection schedules no probe", steps: []step{fail(""), adminEject},
			want: want{state: Ejected, streak: 1, nextProbe: -1, quarantineEnds: -1, ejectedBy: "admin", takesOut: true}},
		{name: "a joining engine is deaf to failures", joining: true, steps: []step{fail(""), fail(""), fail("")},
			want: want{state: Joining, nextProbe: -1, quarantineEnds: -1, takesOut: true}},
		{name: "an operator lifts a quarantine", quarantine: 5 * time.Second, steps: []step{fail(""), lift},
			want: want{state: Admitted, streak: 1, nextProbe: -1, quarantineEnds: -1, takesOut: true}},
		{name: "a peer's quarantine of an admitted engine", steps: []step{peerQuarantine(3 * time.Second)},
			want: want{state: Quarantined, nextProbe: -1, quarantineEnds: 3 * time.Second, takesOut: true}},
		{name: "a peer's quarantine keeps the later end", quarantine: 5 * time.Second, steps: []step{fail(""), peerQuarantine(3 * time.Second)},
			want: want{state: Quarantined, streak: 1, nextProbe: -1, quarantineEnds: 5 * time.Second, takesOut: true}},
		{name: "a peer's quarantine leaves an ejected engine ejected", steps: []step{fail(""), fail(""), fail(""), peerQuarantine(9 * time.Second)},
			want: want{state: Ejected, streak: 3, nextProbe: time.Second, quarantineEnds: -1, ejectedBy: "breaker", takesOut: true}},
		{name: "a peer's readmission clears the quarantine", quarantine: 5 * time.Second, steps: []step{fail(""), peerReadmit},
			want: want{state: Admitted, nextProbe: -1, quarantineEnds: -1, takesOut: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBreaker(recovery(tc.quarantine))
			if !tc.joining {
				b.Joined()
			}
			for _, s := range tc.steps {
				s.do(&b, t0.Add(s.at))
			}
			got := want{state: b.State(), streak: b.Streak(), nextProbe: -1, quarantineEnds: -1, partner: b.Partner(),
				ejectedBy: b.EjectedBy(), takesOut: b.TakesOut()}
			if !b.NextProbe().IsZero() {
				got.nextProbe = b.NextProbe().Sub(t0)
			}
			if !b.QuarantineEnds().IsZero() {
				got.quarantineEnds = b.QuarantineEnds().Sub(t0)
			}
			if got != tc.want {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
			if b.Placeable() != (got.state == Admitted) {
				t.Fatalf("placeable %v in state %s", b.Placeable(), got.state)
			}
		})
	}
}

// The cause of an ejection is the last eject_after failures noted, or the operator's reason,
// or the cause given; a readmission clears it.
func TestBreakerCause(t *testing.T) {
	b := admitted(recovery(0))
	for i := range 5 {
		b.Note("kind" + string(rune('0'+i)))
		b.Failure(t0, "")
	}
	if b.Cause() != "kind0; kind1; kind2" {
		t.Fatalf("failure ejection's cause %q", b.Cause())
	}
	b.EjectByAdmin(t0, "disk swap")
	if b.Cause() != "disk swap" || !b.ByAdmin() {
		t.Fatalf("admin ejection: cause %q, by admin %v", b.Cause(), b.ByAdmin())
	}
	b.ProbeSucceeded()
	if b.Cause() != "" || b.ByAdmin() || b.EjectedBy() != "" {
		t.Fatalf("after readmission: cause %q, by admin %v", b.Cause(), b.ByAdmin())
	}
	j := NewBreaker(recovery(0))
	j.EjectFor(t0, "join check failed: connection refused")
	if j.State() != Ejected || j.EjectedBy() != "breaker" || j.Cause() != "join check failed: connection refused" ||
		!j.NextProbe().Equal(t0.Add(time.Second)) {
		t.Fatalf("after a failed join check: state %s, cause %q, next probe %v", j.State(), j.Cause(), j.NextProbe())
	}
}

// A reload's probe interval applies within the new bounds; a probe already scheduled keeps its time.
func TestBreakerReconfigure(t *testing.T) {
	b := admitted(recovery(0))
	b.EjectFor(t0, "x")
	b.ProbeStarted()
	b.ProbeFailed(t0) // interval 2 s
	b.Reconfigure(config.RecoveryRuntime{EjectAfter: 1, ProbeInterval: 3 * time.Second, ProbeMaxInterval: 10 * time.Second})
	if b.ProbeInterval() != 3*time.Second || !b.NextProbe().Equal(t0.Add(2*time.Second)) {
		t.Fatalf("interval %v, next probe %v", b.ProbeInterval(), b.NextProbe().Sub(t0))
	}
	b.ProbeSucceeded()
	if !b.TakesOut() {
		t.Fatal("with eject_after 1 every counted failure takes the engine out")
	}
}
