package scenarios

import (
	"github.com/narwhal-router/narwhal/bench/harness"
	"github.com/narwhal-router/narwhal/bench/loadgen"
)

// cpuPoint is a proxy's CPU per request in one window of its arm, against the tokens it
// relayed per request.
type cpuPoint struct {
	tokensPerRequest float64
	usPerRequest     float64
	requests         int
}

// pointOf is the point of window w for the process whose usage in it is u (w.Router, w.Peer,
// w.Baseline: the one that served the window's arm).
func pointOf(w harness.Window, u harness.Usage) cpuPoint {
	n := max(w.Result.Sent, 1)
	return cpuPoint{
		tokensPerRequest: float64(w.Result.Tokens) / float64(n),
		usPerRequest:     float64(u.CPU.Microseconds()) / float64(n),
		requests:         w.Result.Sent,
	}
}

// fitArm is one proxy's open-loop windows in the overhead scenario's CPU fit — the router's,
// the peer proxy's or the baseline router's — with what each window measured.
type fitArm struct {
	arm loadgen.Arm
	// router is the Narwhal whose go_memstats_mallocs_total is scraped around each window;
	// nil for the peer, which has no /metrics.
	router *harness.Router
	cpu    []cpuPoint // one per window
	allocs []cpuPoint // heap allocations per request, one per window whose scrapes answered
}

// fitRun is one window of a fitArm.
type fitRun struct {
	w            harness.Window
	cpu          cpuPoint
	allocsPerReq float64 // 0 when not scraped
}

// run runs p on the arm, scraping its allocation count right before and after, so that only
// that window's requests (and the two scrapes) are counted.
func (a *fitArm) run(rig *harness.Rig, p loadgen.Phase) (fitRun, error) {
	p.Arm, p.Name = a.arm, string(a.arm)+"-"+p.Name
	var m0 float64
	scraped := false
	if a.router != nil {
		m0, scraped = mallocs(a.router)
	}
	w, err := rig.Run(p)
	if err != nil {
		return fitRun{}, err
	}
	r := fitRun{w: w, cpu: pointOf(w, w.ProxyUsage(a.arm))}
	a.cpu = append(a.cpu, r.cpu)
	if !scraped {
		return r, nil
	}
	if m1, ok := mallocs(a.router); ok {
		r.allocsPerReq = (m1 - m0) / float64(max(w.Result.Sent, 1))
		a.allocs = append(a.allocs, cpuPoint{tokensPerRequest: r.cpu.tokensPerRequest, usPerRequest: r.allocsPerReq, requests: w.Result.Sent})
	}
	return r, nil
}

// fitLine fits us = intercept + slope × tokens by least squares: the intercept is the CPU per
// request, the slope the CPU per relayed token.
func fitLine(ps []cpuPoint) (intercept, slope float64) {
	var sx, sy, sxx, sxy float64
	n := float64(len(ps))
	for _, p := range ps {
		sx += p.tokensPerRequest
		sy += p.usPerRequest
		sxx += p.tokensPerRequest * p.tokensPerRequest
		sxy += p.tokensPerRequest * p.usPerRequest
	}
	den := n*sxx - sx*sx
	if n == 0 || den == 0 {
		return 0, 0
	}
	slope = (n*sxy - sx*sy) / den
	intercept = (sy - slope*sx) / n
	return intercept, slope
}

// cpuWindow is one routed-only window's totals.
type cpuWindow struct {
	wall     float64 // seconds
	requests float64
	tokens   float64
	cpuUS    float64
}

func windowOf(w harness.Window) cpuWindow {
	return cpuWindow{wall: w.Wall.Seconds(), requests: float64(w.Result.Sent), tokens: float64(w.Result.Tokens),
		cpuUS: float64(w.Router.CPU.Microseconds())}
}

// decompose fits cpu = background × wall + perRequest × requests + perToken × tokens by least
// squares over windows at different rates and lengths: background is what the router burns
// per second just for being busy (runtime monitor, threads spinning for work, timers),
// independent of how many requests it serves; the other two are the marginal costs.
func decompose(ws []cpuWindow) (backgroundUSPerS, perRequest, perToken float64, ok bool) {
	var m [3][3]float64
	var v [3]float64
	for _, w := range ws {
		x := [3]float64{w.wall, w.requests, w.tokens}
		for i := range 3 {
			for j := range 3 {
				m[i][j] += x[i] * x[j]
			}
			v[i] += x[i] * w.cpuUS
		}
	}
	det := det3(m)
	if len(ws) < 3 || det == 0 {
		return 0, 0, 0, false
	}
	var sol [3]float64
	for k := range 3 {
		mk := m
		for i := range 3 {
			mk[i][k] = v[i]
		}
		sol[k] = det3(mk) / det
	}
	return sol[0], sol[1], sol[2], true
}

func det3(m [3][3]float64) float64 {
	return m[0][0]*(m[1][1]*m[2][2]-m[1][2]*m[2][1]) -
		m[0][1]*(m[1][0]*m[2][2]-m[1][2]*m[2][0]) +
		m[0][2]*(m[1][0]*m[2][1]-m[1][1]*m[2][0])
}
