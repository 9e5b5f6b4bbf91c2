package cluster

import (
	"testing"
	"time"
)

func TestBoardNewestUnexpiredVerdictWins(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newBoard("a", "proc-a", 5*time.Second)
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
	b := newBoard("a", "proc-a", 2*time.Second)
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
	b := newBoard("a", "proc-a", 5*time.Second)
	b.decide(Verdict{Engine: "e1", State: StateEjected, Decided: t0}, t0)
	ch := b.receive("id-z", &VerdictSet{Node: "z", Verdicts: []*WireVerdict{
		Verdict{Engine: "e1", State: StateQuarantined, Node: "z", Decided: t0, Expires: t0.Add(time.Second)}.wire()}}, t0)
	if len(ch) != 1 || ch[0].Node != "z" {
		t.Fatalf("changes = %+v: equal instants must fall to the higher node name on every node", ch)
	}
}

// A node restarted under the same name is another process: what its previous process decided
// is a peer's verdict to it, reported like any other.
func TestBoardAppliesTheVerdictsOfThisNodesPreviousProcess(t *testing.T) {
	t0 := time.Unix(4000, 0)
	b := newBoard("a", "proc-a2", 5*time.Second)
	prev := Verdict{Engine: "e1", State: StateEjected, Node: "a", Process: "proc-a1", Decided: t0.Add(-time.Second), Expires: t0.Add(4 * time.Second)}
	ch := b.receive("id-a1", &VerdictSet{Node: "a", Verdicts: []*WireVerdict{prev.wire()}}, t0)
	if len(ch) != 1 || ch[0].Process != "proc-a1" || ch[0].State != StateEjected {
		t.Fatalf("changes = %+v, want the previous process's ejection", ch)
	}
	// This process's own verdict, echoed back from an identity it left (a rejoin), is not news.
	own := b.decide(Verdict{Engine: "e2", State: StateEjected, Decided: t0}, t0)
	if ch := b.receive("id-a2-old", &VerdictSet{Node: "a", Verdicts: []*WireVerdict{own.wire()}}, t0); len(ch) != 0 {
		t.Fatalf("this process's own verdict reported as a peer's: %+v", ch)
	}
}

// A verdict whose node stopped re-publishing it is handed out for re-owning before it lapses;
// once this node publishes a copy it is not handed out again, and both copies are kept.
func TestBoardHandsOutVerdictsNoProcessPublishes(t *testing.T) {
	t0 := time.Unix(5000, 0)
	ttl := 2 * time.Second
	b := newBoard("b", "proc-b", ttl)
	dead := Verdict{Engine: "e1", State: StateEjected, Reason: "3 failures", Node: "a", Process: "proc-a", Decided: t0, Expires: t0.Add(ttl)}
	q := Verdict{Engine: "e2", State: StateQuarantined, Node: "a", Process: "proc-a", Decided: t0, Until: t0.Add(500 * time.Millisecond), Expires: t0.Add(ttl)}
	b.receive("id-a", &VerdictSet{Node: "a", Verdicts: []*WireVerdict{dead.wire(), q.wire()}}, t0)
	if l := b.lapsing(t0.Add(500 * time.Millisecond)); len(l) != 0 {
		t.Fatalf("lapsing = %+v while its node re-publishes on time", l)
	}
	at := t0.Add(1500 * time.Millisecond) // half a TTL without news
	l := b.lapsing(at)
	if len(l) != 1 || l[0].Engine != "e1" || !l[0].Lapsing || l[0].Node != "a" {
		t.Fatalf("lapsing = %+v, want a's ejection of e1 only (e2's quarantine ran out)", l)
	}
	mine := b.decide(Verdict{Engine: "e1", State: StateEjected, Reason: dead.Reason, Origin: "a", Decided: dead.Decided}, at)
	if !mine.Decided.Equal(t0) || mine.Node != "b" || mine.Origin != "a" || mine.DecidedBy() != "a" {
		t.Fatalf("re-owned verdict = %+v", mine)
	}
	if l := b.lapsing(at); len(l) != 0 {
		t.Fatalf("lapsing = %+v after this node re-owned it", l)
	}
	// A copy another live node publishes of the same decision does not retire this one.
	c := dead
	c.Node, c.Process, c.Origin, c.Expires = "z", "proc-z", "a", at.Add(ttl)
	b.receive("id-z", &VerdictSet{Node: "z", Verdicts: []*WireVerdict{c.wire()}}, at)
	if set := b.localSet(at.Add(time.Second)); len(set.Verdicts) != 1 || set.Verdicts[0].Origin != "a" {
		t.Fatalf("set = %+v, want this node's copy kept", set.Verdicts)
	}
	// Well past a's lapse the decision is still live, on this node's re-published copy.
	b.localSet(t0.Add(9 * time.Second))
	if w, ok := b.winner("e1", t0.Add(10*time.Second)); !ok || w.DecidedBy() != "a" {
		t.Fatalf("winner = %+v, %v", w, ok)
	}
}
