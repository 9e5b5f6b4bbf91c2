package health

// Partners orders the candidate partners of a readmission probe or join check, by index:
// those that serve the probe's model first, then the others, each group in random order (rnd
// draws in [0, n)). A probe tries them in this order until one gives a verdict about the
// target, so one bad partner — a producer whose handoffs no consumer can read — never keeps
// the target out while another partner exists, and no partner is asked first every time.
func Partners(n int, serves func(i int) bool, rnd func(n int) int) []int {
	order := make([]int, 0, n)
	for pass := range 2 {
		start := len(order)
		for i := range n {
			if serves(i) == (pass == 0) {
				order = append(order, i)
			}
		}
		group := order[start:]
		for i := len(group) - 1; i > 0; i-- { // Fisher–Yates
			j := rnd(i + 1)
			group[i], group[j] = group[j], group[i]
		}
	}
	return order
}
