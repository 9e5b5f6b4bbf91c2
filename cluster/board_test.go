package cluster

import (
	"testing"
	"time"
)

func TestBoardNewestUnexpiredVerdictWins(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newBoard("a", 5*time.Second)
	b.decide(Verdict{Engine: "e1", State: StateEjected, Reason: "3 failures", Decided: t0}, t0)

	// A peer's older verdict does not win and is not reported.
	older := &VerdictSet{Node: "b", Verdicts: []*WireVerdict{
		Verdict{Engine: "e1", State: StateAdmitted, Node: "b", Decided: t0.Add(-time.Second), Expires: t0.Add(5 * time.Second)}.wire()}}
	if ch := b.receive("id-b", older, t0); len(ch) != 0 {
		t.Fatalf("older peer verdict reported as a change: %+v", ch)
	}
	if w, _ := b.winner("e1", t0); w.Node != "a" || w.State != StateEjected {
		t.Fatalf("winner = %+v, want a's ejection", w)
	}

	// A newer one wins, is reported once, and retires the local verdict from the next set.
	newer := &VerdictSet{Node: "c", Verdicts: []*WireVerdict{
		Verdict{Engine: "e1", State: StateAdmitted, Reason: "probe passed", Node: "c", Decided: t0.Add(time.Second), Expires: t0.Add(6 * time.Second)}.wire()}}
	ch := b.receive("id-c", newer, t0.Add(time.Second))
	if len(ch) != 1 || ch[0].Node != "c" || ch[0].State != StateAdmitted || ch[0].Reason != "probe passed" {
		t.Fatalf("changes = %+v, want c's readmission", ch)
	}
	if ch := b.receive("id-c", newer, t0.Add(time.Second)); len(ch) != 0 {
		t.Fatalf("the same set reported again: %+v", ch)
	}
	if set := b.localSet(t0.Add(time.Second)); len(set.Verdicts) != 0 {
		t.Fatalf("overtaken local verdict still published: %+v", set.Verdicts)
	}

	// Once c stops re-publishing, its verdict expires and nothing is left.
	if _, ok := b.winner("e1", t0.Add(7*time.Second)); ok {
		t.Fatal("expired verdict still wins")
	}
	b.forget(t0.Add(13 * time.Second))
	if len(b.peers) != 0 {
		t.Fatalf("departed members' sets kept: %v", b.peers)
	}
}

func TestBoardRepublishesLiveVerdictsAndDropsOldAdmissions(t *testing.T) {
	t0 := time.Unix(2000, 0)
	b := newBoard("a", 2*time.Second)
	b.decide(Verdict{Engine: "e1", State: StateEjected, Decided: t0}, t0)
	b.decide(Verdict{Engine: "e2", State: StateAdmitted, Decided: t0}, t0)

	set := b.localSet(t0.Add(time.Second))
	if len(set.Verdicts) != 2 {
		t.Fatalf("set = %+v, want both verdicts", set.Verdicts)
	}
	later := t0.Add(3 * time.Second)
	set = b.localSet(later)
	if len(set.Verdicts) != 1 || set.Verdicts[0].Engine != "e1" {
		t.Fatalf("set = %+v, want only the live ejection", set.Verdicts)
	}
	if got := time.Unix(0, set.Verdicts[0].ExpiresUnixNano); !got.Equal(later.Add(2 * time.Second)) {
		t.Fatalf("re-published deadline = %v, want %v", got, later.Add(2*time.Second))
	}
}

func TestBoardTieBreaksOnNodeName(t *testing.T) {
	t0 := time.Unix(3000, 0)
	b := newBoard("a", 5*time.Second)
	b.decide(Verdict{Engine: "e1", State: StateEjected, Decided: t0}, t0)
	ch := b.receive("id-z", &VerdictSet{Node: "z", Verdicts: []*WireVerdict{
		Verdict{Engine: "e1", State: StateQuarantined, Node: "z", Decided: t0, Expires: t0.Add(time.Second)}.wire()}}, t0)
	if len(ch) != 1 || ch[0].Node != "z" {
		t.Fatalf("changes = %+v: equal instants must fall to the higher node name on every node", ch)
	}
}
