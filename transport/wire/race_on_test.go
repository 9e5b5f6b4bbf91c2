//go:build race

package wire

// raceEnabled: the race detector makes sync.Pool drop items at random, so allocation budgets
// cannot hold under it.
const raceEnabled = true
