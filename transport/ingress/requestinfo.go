package ingress

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/narwhal-router/narwhal/config"
)

// What a request says about itself in its headers, and the timing headers it gets back.

// requestDeadline is arrival + d (request.deadline_s), which X-Narwhal-Deadline-S may only shorten.
func requestDeadline(d time.Duration, arrival time.Time, header []byte) (time.Time, error) {
	if len(header) > 0 {
		s, err := strconv.ParseFloat(strings.TrimSpace(string(header)), 64)
		// NaN and ±Inf parse, and 1e300 s overflows a Duration into a negative one: all refused.
		if err != nil || !(s > 0 && s <= config.MaxSeconds) {
			return time.Time{}, fmt.Errorf("X-Narwhal-Deadline-S must be a number of seconds greater than 0 and at most %d, got %q",
				config.MaxSeconds, excerptHeader(header))
		}
		if hd := time.Duration(s * float64(time.Second)); hd < d {
			d = hd
		}
	}
	return arrival.Add(d), nil
}

// excerptHeader quotes at most 32 bytes of a client header for an error message.
func excerptHeader(h []byte) string {
	if len(h) > 32 {
		h = h[:32]
	}
	return strings.ToValidUTF8(string(h), "?")
}

// clientRequestID honours a client's X-Request-Id when it is printable ASCII of at most 128
// bytes, and otherwise makes a fresh one.
func clientRequestID(h []byte) string {
	if len(h) == 0 || len(h) > 128 {
		return uuid.NewString()
	}
	for _, c := range h {
		if c < 0x21 || c > 0x7e {
			return uuid.NewString()
		}
	}
	return string(h)
}

// serverTiming renders the measurement contract as a Server-Timing header. Both metrics are
// always named; a duration is given only for events that happened.
func serverTiming(t Timing) string {
	b := make([]byte, 0, 48)
	b = append(b, "ttft"...)
	b = appendDur(b, t.TTFT)
	b = append(b, ", first_byte"...)
	b = appendDur(b, t.FirstByte)
	return string(b)
}

func appendDur(b []byte, d time.Duration) []byte {
	if d <= 0 {
		return b
	}
	b = append(b, ";dur="...)
	return strconv.AppendFloat(b, float64(d)/float64(time.Millisecond), 'f', 3, 64)
}
