package cluster

import (
	"errors"
	"time"
)

// rejoinRequest asks for a new incarnation because the one named is no longer accepted.
type rejoinRequest struct {
	memberID string
	why      string
}

// rejoin asks the loop to replace the incarnation memberID with a new one. A request about an
// incarnation already replaced is dropped by the loop: it was late news. The newest request
// wins over one still waiting.
func (n *Node) rejoin(memberID, why string) {
	// The incarnation is done: from now on it sends nothing (incarnation.dialer), so that peers,
	// which have dropped it, have nothing to answer while it is being replaced.
	if inc := n.current(); inc != nil && inc.system.ID == memberID {
		inc.retired.Store(true)
	}
	req := rejoinRequest{memberID, why}
	for {
		select {
		case n.rejoiner <- req:
			return
		default:
		}
		select {
		case <-n.rejoiner: // an older request makes way
		default:
		}
	}
}

// watchdog notices that this process did not run for longer than peers wait for it (stopped,
// a frozen VM, starved): they have dropped its identity, and the legs that were in flight timed
// out through no engine's fault. It fences the node — failure verdicts are held back until the
// stall's timeouts have drained — and asks for a rejoin under a new identity.
func (n *Node) watchdog() {
	defer n.wg.Done()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	suspect := n.cfg.SuspectAfterS.Duration()
	last := time.Now()
	for {
		select {
		case <-n.done:
			return
		case <-t.C:
		}
		now := time.Now()
		gap := now.Sub(last)
		last = now
		if gap > suspect {
			// Fenced and muted before the tick says the process runs again (stallUnseen).
			n.mu.Lock()
			n.stalls++
			n.fencedUntil = now.Add(suspect + n.cfg.GossipIntervalS.Duration())
			n.mu.Unlock()
			n.rejoin(n.memberID(), "stalled for "+gap.Round(time.Millisecond).String())
			n.log.Warn("this node stalled; fencing it and rejoining the cluster", "stall", gap.String())
		}
		n.tick.Store(int64(now.Sub(n.epoch)))
	}
}

// loop publishes, re-publishes, watches for stalls and rejoins, one thing at a time.
func (n *Node) loop() {
	defer n.wg.Done()
	republish := time.NewTicker(n.cfg.RepublishIntervalS.Duration())
	defer republish.Stop()
	retry := time.NewTicker(n.cfg.SuspectAfterS.Duration())
	defer retry.Stop()
	for {
		select {
		case <-n.done:
			return
		case <-n.push:
			n.send()
		case <-republish.C:
			n.handLapsing(time.Now())
			n.board.forget(time.Now())
			n.forgetGossip()
			n.send()
		case <-retry.C:
			if n.current() == nil && !n.joining.Load() {
				n.startJoin()
			}
		case r := <-n.rejoiner:
			if r.memberID == n.memberID() {
				n.doRejoin(r.why)
			}
		}
	}
}

// firstJoinWait bounds how long Start waits for the first join.
const firstJoinWait = 5 * time.Second

// startJoin starts a join unless one is under way, and delivers its result. A join may hang
// (an unreachable etcd); while it does, no other starts.
func (n *Node) startJoin() <-chan error {
	res := make(chan error, 1)
	if !n.joining.CompareAndSwap(false, true) {
		res <- errors.New("a join is under way")
		return res
	}
	go func() {
		defer n.joining.Store(false)
		err := n.join()
		if err != nil {
			n.mu.Lock()
			n.startErr = err.Error()
			n.mu.Unlock()
		}
		res <- err
	}()
	return res
}

func (n *Node) doRejoin(why string) {
	n.mu.Lock()
	n.lastRejoin, n.rejoinWhy = time.Now(), why
	n.mu.Unlock()
	n.log.Info("rejoining the cluster under a new member identity", "reason", why)
	n.leave(true)
	n.startJoin() // the retry tick tries again if it fails
}

// Fenced reports whether this node is just back from a stall: failures its legs saw during
// the stall are the stall's, not the engines'.
func (n *Node) Fenced() bool {
	if n == nil {
		return false
	}
	if n.stallUnseen() {
		return true // resumed, and a leg's timeout ran before the watchdog
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return time.Now().Before(n.fencedUntil)
}

// stallUnseen reports whether the watchdog's last tick is older than suspect_after_s: this
// process has just resumed from a stall that the watchdog has not run to notice yet. (Before
// its first tick, nothing is known.)
func (n *Node) stallUnseen() bool {
	t := n.tick.Load()
	return t != 0 && time.Since(n.epoch)-time.Duration(t) > n.cfg.SuspectAfterS.Duration()
}
