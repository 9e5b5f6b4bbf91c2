package wire

// classifyOracle is Classify as it was before the in-place scan: the checks for [DONE] and an
// error object, then the event decoded with goccy/go-json (classifyDecoded, which Classify still
// uses for the rare shapes the scan leaves to it). The scan must give its verdict for every
// input (TestClassifyMatchesDecoder, FuzzClassifyMatchesDecoder); the table test holds the
// oracle itself to stated verdicts.
func classifyOracle(data []byte) EventKind {
	if k, ok := classifyFixed(data); ok {
		return k
	}
	return classifyDecoded(data)
}
