package flow

import (
	"fmt"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

// fill pushes n requests of a tenant, keys tenant-0…, and fails the test unless each waits.
func fill(t *testing.T, q *Queue[string], tenant string, n int, cost int64, weight float64, band int) {
	t.Helper()
	for i := 0; i < n; i++ {
		v, _ := q.Push(t0, Request[string]{Key: fmt.Sprintf("%s-%d", tenant, i), Tenant: tenant, Cost: cost, Weight: weight, Band: band, Arrival: t0})
		if v != Queued {
			t.Fatalf("push %s-%d: %v", tenant, i, v)
		}
	}
}

// served pops n times and counts the pops per tenant.
func served(q *Queue[string], n int) map[string]int {
	got := map[string]int{}
	for i := 0; i < n; i++ {
		r, ok, _ := q.Pop(t0, nil)
		if !ok {
			break
		}
		got[r.Tenant]++
	}
	return got
}

func TestSlotsGoToTenantsInProportionToWeightedTokens(t *testing.T) {
	type flow struct {
		cost   int64
		weight float64
	}
	for _, tc := range []struct {
		name  string
		a, b  flow
		pops  int
		wantA int
		wantB int
	}{
		{"equal weights, equal prompts: alternate", flow{100, 1}, flow{100, 1}, 40, 20, 20},
		{"weights 3:1 take slots 3:1", flow{100, 3}, flow{100, 1}, 40, 30, 10},
		{"ten times the tokens get a tenth of the slots", flow{1000, 1}, flow{100, 1}, 44, 4, 40},
		{"weight makes up for long prompts", flow{1000, 10}, flow{100, 1}, 40, 20, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := New[string](nil, Limits{MaxQueue: 1000})
			fill(t, q, "a", 100, tc.a.cost, tc.a.weight, 0)
			fill(t, q, "b", 100, tc.b.cost, tc.b.weight, 0)
			got := served(q, tc.pops)
			if d := got["a"] - tc.wantA; d < -1 || d > 1 || got["a"]+got["b"] != tc.pops {
				t.Fatalf("served %v, want a %d b %d (±1)", got, tc.wantA, tc.wantB)
			}
		})
	}
}

func TestATenantAloneGetsEverySlot(t *testing.T) {
	q := New[string](nil, Limits{MaxQueue: 100})
	fill(t, q, "a", 10, 5000, 0.1, 0)
	if got := served(q, 10); got["a"] != 10 {
		t.Fatalf("served %v, want all 10 to a", got)
	}
}

func TestAnIdleTenantBanksNoCredit(t *testing.T) {
	q := New[string](nil, Limits{MaxQueue: 1000})
	fill(t, q, "a", 200, 100, 1, 0)
	served(q, 100) // a alone for a while
	fill(t, q, "b", 50, 100, 1, 0)
	// b starts at the band's virtual time: from here the two alternate, b does not take the
	// next hundred slots to catch up.
	if got := served(q, 20); got["a"] < 9 || got["b"] < 9 {
		t.Fatalf("after b arrived: %v, want them alternating", got)
	}
}

func TestHigherBandsGoFirstForTheSameEngine(t *testing.T) {
	q := New[string]([]Band{{Name: "interactive"}, {Name: "batch"}}, Limits{MaxQueue: 10})
	q.Push(t0, Request[string]{Key: "batch-1", Tenant: "x", Band: 1, Cost: 1, Arrival: t0})
	q.Push(t0, Request[string]{Key: "chat-model-b", Tenant: "y", Band: 0, Cost: 1, Arrival: t0})
	q.Push(t0, Request[string]{Key: "chat-1", Tenant: "y", Band: 0, Cost: 1, Arrival: t0})
	for _, step := range []struct {
		engineServes func(string) bool
		want         string
	}{
		{func(k string) bool { return k != "chat-model-b" }, "chat-1"},       // the higher band, though later than batch-1
		{func(k string) bool { return k != "chat-model-b" }, "batch-1"},      // nothing of band 0 this engine can serve
		{func(k string) bool { return k == "chat-model-b" }, "chat-model-b"}, // another engine's model
	} {
		r, ok, _ := q.Pop(t0, step.engineServes)
		if !ok || r.Key != step.want {
			t.Fatalf("popped %q (%v), want %q", r.Key, ok, step.want)
		}
	}
}

func TestATenantsEarliestDeadlineGoesFirst(t *testing.T) {
	q := New[string]([]Band{{Name: "interactive", TTFTTarget: 3 * time.Second}}, Limits{MaxQueue: 10})
	for _, r := range []Request[string]{
		{Key: "none", Tenant: "a", Cost: 1, Arrival: t0},                                                    // band target: t0+3s
		{Key: "five", Tenant: "a", Cost: 1, Arrival: t0, Deadline: t0.Add(5 * time.Second)},                 // target is earlier: t0+3s
		{Key: "two", Tenant: "a", Cost: 1, Arrival: t0.Add(time.Second), Deadline: t0.Add(2 * time.Second)}, // t0+2s
	} {
		q.Push(t0, r)
	}
	var order []string
	for {
		r, ok, _ := q.Pop(t0, nil)
		if !ok {
			break
		}
		order = append(order, r.Key)
	}
	if fmt.Sprint(order) != "[two none five]" {
		t.Fatalf("order %v, want [two none five]: earliest deadline, then arrival", order)
	}
}

func TestOverloadShedsByRule(t *testing.T) {
	bands := []Band{{Name: "interactive"}, {Name: "standard"}, {Name: "batch"}, {Name: "scavenger", Sheddable: true}}
	for _, tc := range []struct {
		name         string
		limits       Limits
		queued       []Request[string]
		arrival      Request[string]
		want         Verdict
		wantDisplace string
	}{
		{name: "a sheddable band never waits", limits: Limits{MaxQueue: 10},
			arrival: Request[string]{Key: "s", Tenant: "a", Band: 3}, want: Shed},
		{name: "a full queue sheds the newest of the lowest band below the arrival", limits: Limits{MaxQueue: 3},
			queued:  []Request[string]{{Key: "std", Tenant: "a", Band: 1}, {Key: "batch-old", Tenant: "a", Band: 2}, {Key: "batch-new", Tenant: "b", Band: 2}},
			arrival: Request[string]{Key: "i", Tenant: "c", Band: 0}, want: Queued, wantDisplace: "batch-new"},
		{name: "a full queue of the arrival's band or higher refuses it", limits: Limits{MaxQueue: 2},
			queued:  []Request[string]{{Key: "i", Tenant: "a", Band: 0}, {Key: "std", Tenant: "a", Band: 1}},
			arrival: Request[string]{Key: "std2", Tenant: "b", Band: 1}, want: QueueFull},
		{name: "a tenant over its allowance is refused while others wait", limits: Limits{MaxQueue: 10, MaxPerTenant: 2},
			queued:  []Request[string]{{Key: "a1", Tenant: "a"}, {Key: "a2", Tenant: "a", Band: 1}},
			arrival: Request[string]{Key: "a3", Tenant: "a"}, want: TenantFull},
		{name: "max_queue 0: nothing waits", limits: Limits{MaxQueue: 0},
			arrival: Request[string]{Key: "x", Tenant: "a"}, want: QueueFull},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := New[string](bands, tc.limits)
			for _, r := range tc.queued {
				if v, _ := q.Push(t0, r); v != Queued {
					t.Fatalf("setup %s: %v", r.Key, v)
				}
			}
			v, displaced := q.Push(t0, tc.arrival)
			if v != tc.want {
				t.Fatalf("verdict %v, want %v", v, tc.want)
			}
			if got := ""; len(displaced) > 0 {
				got = displaced[0].Key
				if got != tc.wantDisplace || len(displaced) != 1 {
					t.Fatalf("displaced %v, want %q", displaced, tc.wantDisplace)
				}
			} else if tc.wantDisplace != "" {
				t.Fatalf("displaced nothing, want %q", tc.wantDisplace)
			}
			if want := len(tc.queued); v == Queued && q.Len() != want+1-len(displaced) {
				t.Fatalf("len %d", q.Len())
			}
		})
	}
}

func TestADeadlineTheDrainRateCannotMeetIsRefusedBeforeItWaits(t *testing.T) {
	q := New[string]([]Band{{Name: "high"}, {Name: "low"}}, Limits{MaxQueue: 1000})
	// Measure: 1,000 tokens a second leave while requests wait.
	fill(t, q, "a", 50, 100, 1, 0)
	now := t0
	for i := 0; i < 20; i++ {
		now = now.Add(100 * time.Millisecond)
		if _, ok, _ := q.Pop(now, nil); !ok {
			t.Fatal("empty")
		}
	}
	// 30 requests of 100 tokens wait in the high band: about 3 s of work ahead of any request of
	// the low band, 0.1 s ahead of another high-band tenant's (its fair share), none ahead of
	// the high-band tenant's own request with the earliest deadline.
	for _, tc := range []struct {
		tenant   string
		band     int
		deadline time.Duration
		want     Verdict
	}{
		{"b", 1, time.Second, Unmeetable},
		{"b", 1, 10 * time.Second, Queued},
		{"c", 0, time.Second, Queued},
		{"a", 0, 500 * time.Millisecond, Queued},
	} {
		v, _ := q.Push(now, Request[string]{Key: fmt.Sprint(tc), Tenant: tc.tenant, Band: tc.band, Cost: 100, Arrival: now, Deadline: now.Add(tc.deadline)})
		if v != tc.want {
			t.Fatalf("%+v: %v, want %v", tc, v, tc.want)
		}
	}
}

func TestARequestWhoseDeadlinePassesLeavesAtTheNextPop(t *testing.T) {
	q := New[string](nil, Limits{MaxQueue: 10})
	q.Push(t0, Request[string]{Key: "late", Tenant: "a", Cost: 1, Arrival: t0, Deadline: t0.Add(time.Second)})
	q.Push(t0, Request[string]{Key: "ok", Tenant: "a", Cost: 1, Arrival: t0})
	r, ok, expired := q.Pop(t0.Add(2*time.Second), func(k string) bool { return k == "ok" })
	if !ok || r.Key != "ok" || len(expired) != 1 || expired[0].Key != "late" || q.Len() != 0 {
		t.Fatalf("popped %q %v, expired %v, len %d", r.Key, ok, expired, q.Len())
	}
}

func TestAReturnedRequestKeepsItsPlaceAndItsTenantsCredit(t *testing.T) {
	q := New[string](nil, Limits{MaxQueue: 10})
	fill(t, q, "a", 3, 100, 1, 0)
	fill(t, q, "b", 3, 100, 1, 0)
	first, _, _ := q.Pop(t0, nil)
	// It lost the race for the slot and comes back: it is its tenant's next, and its tenant is
	// still the band's next, as if the wake-up had not happened.
	first.Returned = true
	if v, _ := q.Push(t0, first); v != Queued {
		t.Fatalf("returned: %v", v)
	}
	if again, _, _ := q.Pop(t0, nil); again.Key != first.Key {
		t.Fatalf("popped %q, want the returned %q", again.Key, first.Key)
	}
}

func TestRemoveForgetsARequestAndAnIdleTenant(t *testing.T) {
	q := New[string](nil, Limits{MaxQueue: 10, MaxPerTenant: 1})
	q.Push(t0, Request[string]{Key: "k", Tenant: "a", Cost: 7, Arrival: t0})
	if !q.Remove("k") || q.Remove("k") || q.Len() != 0 {
		t.Fatal("remove")
	}
	if v, _ := q.Push(t0, Request[string]{Key: "k2", Tenant: "a", Cost: 7, Arrival: t0}); v != Queued {
		t.Fatalf("after remove the tenant's allowance is back: %v", v)
	}
	if len(q.bands[0].tenants) != 1 || len(q.perTenant) != 1 {
		t.Fatal("tenant state")
	}
	q.Remove("k2")
	if len(q.bands[0].tenants) != 0 || len(q.perTenant) != 0 {
		t.Fatalf("an idle tenant is not forgotten: %v %v", q.bands[0].tenants, q.perTenant)
	}
}
