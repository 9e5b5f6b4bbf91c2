package flow

import "time"

// drainWindow is how much busy time one measurement of the drain rate covers.
const drainWindow = time.Second

// drainRate measures how fast the queue hands out work: estimated tokens popped per second of
// time during which requests waited. Time with an empty queue is not counted, so a quiet spell
// does not read as a slow fleet. Each window of busy time moves the average halfway to the
// window's own rate.
type drainRate struct {
	last   time.Time // the previous call's time
	busy   time.Duration
	tokens int64
	rate   float64 // tokens per second; 0 until a first window is complete
}

// tick accounts the time since the previous call as busy when requests waited through it.
func (d *drainRate) tick(now time.Time, waiting bool) {
	if waiting && !d.last.IsZero() && now.After(d.last) {
		d.busy += now.Sub(d.last)
	}
	d.last = now
	if d.busy >= drainWindow {
		r := float64(d.tokens) / d.busy.Seconds()
		if d.rate == 0 {
			d.rate = r
		} else {
			d.rate = (d.rate + r) / 2
		}
		d.busy, d.tokens = 0, 0
	}
}

func (d *drainRate) served(tokens int64) { d.tokens += tokens }

// known says whether a rate was measured (and is not zero: a queue that drained nothing in a
// whole busy window gives no basis for refusing anyone).
func (d *drainRate) known() bool { return d.rate > 0 }

// timeFor is how long draining tokens takes at the measured rate.
func (d *drainRate) timeFor(tokens int64) time.Duration {
	return time.Duration(float64(tokens) / d.rate * float64(time.Second))
}
