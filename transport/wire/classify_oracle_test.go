package wire

import "bytes"

// classifyOracle is Classify as it was before the in-place scan: the checks for [DONE] and an
// error object, then the event decoded with goccy/go-json (classifyDecoded, which Classify still
// uses for the rare shapes the scan leaves to it). The scan must give its verdict for every
// input (TestClassifyMatchesDecoder, FuzzClassifyMatchesDecoder); the table test holds the
// oracle itself to stated verdicts.
func classifyOracle(data []byte) EventKind {
	switch {
	case data == nil:
		return EventMeta
	case bytes.Equal(data, doneData):
		return EventDone
	case IsErrorData(data):
		return EventError
	}
	return classifyDecoded(data)
}
