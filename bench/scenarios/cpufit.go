package scenarios

import "github.com/narwhal-router/narwhal/bench/harness"

// cpuPoint is the router's CPU per request in one routed-only window, against the tokens it
// relayed per request.
type cpuPoint struct {
	tokensPerRequest float64
	usPerRequest     float64
	requests         int
}

func pointOf(w harness.Window) cpuPoint {
	n := max(w.Result.Sent, 1)
	return cpuPoint{
		tokensPerRequest: float64(w.Result.Tokens) / float64(n),
		usPerRequest:     float64(w.Router.CPU.Microseconds()) / float64(n),
		requests:         w.Result.Sent,
	}
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
