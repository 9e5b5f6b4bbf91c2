package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/actors/health"
	"github.com/narwhal-router/narwhal/cluster"
)

// What the engine actors share with the other Narwhal nodes (package cluster) and how they
// apply what the peers decided. The rules:
//   - an engine is known by its name on every node: an engine a node adds takes the live
//     verdict a peer published about it (adopt); a join check that passed is not shared (every
//     node checks the engines it adds), one that failed is an ejection like any other;
//   - every local breaker decision is published at once: quarantined, ejected (by failures or
//     by an operator), probing, and admitted after a successful probe or an operator's readmit.
//     A quarantine that simply ran out is not news: every node runs the same clock on it.
//   - a peer's ejection or quarantine takes the engine out of placement here at once;
//   - only a peer's admission (a probe that passed, or an operator) readmits an engine here;
//     an operator's ejection is lifted only by an operator's admission;
//   - the later decision wins, by the deciding node's clock: a peer verdict older than what
//     this engine actor last decided or applied changes nothing;
//   - a verdict is this node's own when this process published it: what the node's previous
//     process decided (before a restart, under the same name) is a peer's verdict and applies;
//   - a peer's verdict this engine actor still holds the engine out on is re-owned when no
//     process publishes it any more (its node is down, cut off, or restarted): this node
//     publishes it as its own, with the decision's instant, reason and operator flag, so that it
//     lives as long as a node acts on it and a node that starts later still adopts it (reown);
//   - streaks stay local (a failure seen here counts here only): one node's unlucky requests are
//     not evidence enough for the fleet, an ejection is.

// peerState is an engine actor's cluster bookkeeping.
type peerState struct {
	// decided is when the engine's current standing was decided, here or by a peer.
	decided time.Time
	// by names the node whose verdict the standing comes from ("" when decided here).
	by string
	// reason is the peer's reason, shown in /engines.
	reason string
	// applying is set while a peer verdict is applied, so the transition is not re-published.
	applying bool
	// operator is set while an operator's eject or readmit is handled here.
	operator bool
	// takenOver says this node probes the engine although another node is its prober, which
	// has said nothing of it (probesHere); a peer's verdict ends it.
	takenOver bool
}

// peerVerdict carries a peer's verdict to the engine actor it is about.
type peerVerdict struct{ v cluster.Verdict }

// PeerVerdict hands a peer's verdict to its engine actor. It is the cluster node's OnVerdict.
// A verdict about an engine this node has not added (yet) is not lost: the cluster node keeps
// the live verdicts, and an engine actor adopts the one about its engine when it starts.
func (r *Router) PeerVerdict(v cluster.Verdict) {
	e := r.fleet.Load().Engine(v.Engine)
	if e == nil || pidOf(e) == nil {
		r.log.Debug("verdict about an engine this node does not have", "engine", v.Engine, "node", v.Node)
		return
	}
	r.root.Send(pidOf(e), &peerVerdict{v})
}

// adopt applies, to an engine just added, the live verdict a peer published about it: the
// engine's name is the same on every node, so what another node decided about it holds here
// too (an ejected engine starts ejected, an admitted one admitted without a check of its own).
func (a *engineActor) adopt(ctx actor.Context) {
	v, ok := a.r.cluster.Verdict(a.st.spec.Name)
	if !ok || a.r.cluster.Own(v) {
		return
	}
	a.applyPeer(ctx, v)
}

// Cluster is this node's cluster membership; nil when the cluster is off.
func (r *Router) Cluster() *cluster.Node { return r.cluster }

// share publishes a local breaker decision to the peers.
func (a *engineActor) share(from health.State) {
	st := a.st
	if st.peer.applying {
		return
	}
	b := &st.breaker
	if from == health.Joining && b.State() == health.Admitted && !st.peer.operator {
		// A join check that passed is this node's own business: every node checks an engine it
		// adds. It is not shared, and it does not outrank a peer's verdict this node has not
		// heard yet (an ejection decided before the check is still applied when it arrives).
		return
	}
	now := time.Now()
	st.peer.decided, st.peer.by, st.peer.reason = now, "", ""
	if a.r.cluster == nil {
		return
	}
	v := cluster.Verdict{Engine: st.spec.Name, State: b.State().String(), Decided: now, Admin: st.peer.operator || b.ByAdmin()}
	switch b.State() {
	case health.Quarantined:
		v.Until, v.Reason = b.QuarantineEnds(), "failure quarantine"
	case health.Ejected:
		v.Until = b.NextProbe()
		switch {
		case b.ByAdmin():
			v.Reason = "ejected by an operator"
			if b.Cause() != "" {
				v.Reason += ": " + b.Cause()
			}
		case from == health.Joining:
			v.Reason = b.Cause() // the failed join check
		case from == health.Probing:
			v.Reason = "probe did not pass"
			if p := st.lastProbe; p != nil {
				if p.Result == probeInconclusive {
					v.Reason = "probe inconclusive"
				}
				v.Reason += ": " + p.Reason
			}
		default:
			v.Reason = "ejected after consecutive failures"
			if b.Cause() != "" {
				v.Reason += ": " + b.Cause()
			}
		}
	case health.Probing:
		v.Until, v.Reason = now.Add(3*a.r.rt.Engine.FirstTokenTimeoutS.Duration()), "probe in flight"
	case health.Admitted:
		if from == health.Quarantined && !st.peer.operator {
			return // a quarantine that ran out; every node times it itself
		}
		v.Reason = "probe passed"
		if st.lastProbe != nil && st.lastProbe.Reason != "" {
			v.Reason = st.lastProbe.Reason
		}
		if st.peer.operator {
			v.Reason = "readmitted by an operator"
		}
	}
	a.r.cluster.Publish(v)
	a.r.metrics.ClusterVerdict(v.Engine, v.State, "published")
}

// applyPeer brings this node's view of the engine in line with a peer's newer verdict.
func (a *engineActor) applyPeer(ctx actor.Context, v cluster.Verdict) {
	st := a.st
	b := &st.breaker
	if v.Lapsing {
		a.reown(v)
		return
	}
	if !v.Decided.After(st.peer.decided) {
		a.r.metrics.ClusterVerdict(v.Engine, v.State, "stale")
		return // this node decided or heard something newer
	}
	now := time.Now()
	prev := b.State()
	switch v.State {
	case cluster.StateEjected, cluster.StateProbing:
		switch {
		case v.Admin:
			if prev == health.Probing || prev == health.Joining {
				st.probeGen++ // our probe must not readmit the engine behind the operator's back
				st.checking = false
			}
			b.EjectByAdmin(now, v.Reason)
			if prev == health.Ejected { // no transition, but the standing changed
				a.publish(ctx, true)
				a.schedule(ctx) // no probe of an operator's ejection
			}
		case b.ByAdmin():
			// An operator's ejection holds until an operator's readmission.
		case prev == health.Admitted || prev == health.Quarantined || prev == health.Joining:
			if prev == health.Joining {
				st.probeGen++ // the peer's evidence stands for the join check in flight
				st.checking = false
			}
			b.EjectFor(now, v.Reason)
		}
		if v.Until.After(now) && !b.ByAdmin() {
			b.ProbeAt(v.Until) // follow the prober's cadence
		}
	case cluster.StateQuarantined:
		if (prev != health.Admitted || v.Until.After(now)) && b.Quarantine(v.Until) {
			a.schedule(ctx) // a later end: the timer is armed again
		}
	case cluster.StateAdmitted:
		if b.ByAdmin() && !v.Admin {
			return // an operator's ejection ends only with an operator's word
		}
		if prev != health.Admitted {
			st.probeGen++ // a probe or join check of ours in flight is moot now
			st.checking = false
			b.Readmitted()
		}
	default:
		return
	}
	st.peer.decided, st.peer.by, st.peer.reason = v.Decided, v.DecidedBy(), v.Reason
	st.peer.takenOver = false
	a.r.metrics.ClusterVerdict(v.Engine, v.State, "applied")
	if b.State() != prev {
		st.peer.applying = true
		a.transition(ctx, prev)
		st.peer.applying = false
		a.schedule(ctx)
	}
}

// reown publishes, as this node's own, a peer's verdict that no process publishes any more
// (cluster board.lapsing) when this engine actor still holds the engine out on it: the
// decision keeps its instant, reason, operator flag and deciding node (Origin), so it outranks
// nothing decided since, and a node that starts later adopts it. A verdict this actor has moved
// on from (it decided or applied something newer) or that holds nothing out here is left to
// lapse.
func (a *engineActor) reown(v cluster.Verdict) {
	st := a.st
	b := &st.breaker
	if a.r.cluster == nil || st.peer.by == "" || !v.Decided.Equal(st.peer.decided) {
		return
	}
	now := time.Now()
	own := cluster.Verdict{Engine: st.spec.Name, State: b.State().String(), Decided: v.Decided,
		Reason: v.Reason, Admin: v.Admin || b.ByAdmin(), Origin: v.DecidedBy()}
	switch b.State() {
	case health.Ejected:
		own.Until = b.NextProbe()
	case health.Quarantined:
		if !b.QuarantineEnds().After(now) {
			return
		}
		own.Until = b.QuarantineEnds()
	default:
		return // admitted holds nothing out; a probe of this node's publishes its own result
	}
	a.r.log.Info("re-publishing a verdict its node no longer publishes: the engine is still out here",
		"engine", st.spec.Name, "state", own.State, "decided_by", own.Origin, "publisher", v.Node)
	a.r.cluster.Publish(own)
	a.r.metrics.ClusterVerdict(own.Engine, own.State, "reowned")
}

// probesHere reports whether this node runs the next probe of the engine: with peers, one node
// probes an engine per interval (cluster.ShouldProbe); the others wait for its verdict. The
// fleet is each node's own, though — an engine added through one node's admin API is that node's
// alone — so the node the engine's name hashes to may not have it, and would never probe it.
// When no peer has said anything of the engine for longer than a probe interval since this
// node's own verdict, this node takes the probing over, until a peer speaks again.
func (a *engineActor) probesHere() bool {
	st := a.st
	if a.r.cluster.ShouldProbe(st.spec.Name) {
		return true
	}
	v, ok := a.r.cluster.Verdict(st.spec.Name)
	switch {
	case !ok:
		return true
	case !a.r.cluster.Own(v):
		return false // the prober speaks
	case st.peer.takenOver:
		return true
	case time.Since(v.Decided) > st.breaker.ProbeInterval()*3/2:
		a.r.log.Info("engine probed here: the node that would probe it has said nothing of it", "engine", st.spec.Name)
		st.peer.takenOver = true
		return true
	}
	return false
}
