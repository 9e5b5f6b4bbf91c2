package wire

import "io"

// LegBody is an engine leg's body as a list of byte slices that mostly reference the client's
// own bytes: the rewrite of a large body (a long prompt) is sent to an engine without being
// copied, so a request held for its legs costs about its body once, not once per leg.
type LegBody struct {
	segs [][]byte
	n    int
}

// refMin is the smallest value a LegBody references instead of copying.
const refMin = 1 << 10

// segmentObject is RewriteObject's output as a LegBody: the same bytes, values of refMin bytes
// or more referenced (from data, or an edit's value).
func segmentObject(data []byte, fields []Field, edits []Edit) *LegBody {
	// First the size of what is copied (commas, keys, colons, small values), so that the
	// scratch buffer never moves under the segments that point into it.
	copied := 2
	rewriteMembers(data, fields, edits, func(rawKey []byte, key string, value []byte) {
		copied += 1 + len(rawKey) + len(key) + 2 + 1
		if len(value) < refMin {
			copied += len(value)
		}
	})
	lb := &LegBody{}
	scratch := make([]byte, 0, copied)
	from := 0 // start of the scratch bytes not yet in a segment
	flush := func() {
		if len(scratch) > from {
			lb.segs = append(lb.segs, scratch[from:len(scratch):len(scratch)])
			from = len(scratch)
		}
	}
	scratch = append(scratch, '{')
	first := true
	rewriteMembers(data, fields, edits, func(rawKey []byte, key string, value []byte) {
		if len(value) < refMin {
			scratch = appendMember(scratch, &first, rawKey, key, value)
			return
		}
		scratch = appendMember(scratch, &first, rawKey, key, nil)
		flush()
		lb.segs = append(lb.segs, value)
	})
	scratch = append(scratch, '}')
	flush()
	return LegBodyOf(lb.segs)
}

// LegBodyOf is a body made of chunks, in order (referenced, not copied).
func LegBodyOf(chunks [][]byte) *LegBody {
	lb := &LegBody{segs: chunks}
	for _, c := range chunks {
		lb.n += len(c)
	}
	return lb
}

// Len is the body's size in bytes.
func (b *LegBody) Len() int { return b.n }

// Bytes copies the body into one slice (tests, and callers that need it whole).
func (b *LegBody) Bytes() []byte {
	out := make([]byte, 0, b.n)
	for _, s := range b.segs {
		out = append(out, s...)
	}
	return out
}

// Reader returns a reader over the body from its start; each write of a leg (a resend on a fresh
// connection included) takes its own.
func (b *LegBody) Reader() *LegBodyReader {
	return &LegBodyReader{segs: append([][]byte(nil), b.segs...)}
}

// LegBodyReader reads a LegBody once. It implements io.WriterTo, so a large segment goes to the
// connection in one write.
type LegBodyReader struct{ segs [][]byte }

func (r *LegBodyReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && len(r.segs) > 0 {
		c := copy(p[n:], r.segs[0])
		n += c
		if r.segs[0] = r.segs[0][c:]; len(r.segs[0]) == 0 {
			r.segs = r.segs[1:]
		}
	}
	if n == 0 && len(r.segs) == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// WriteTo writes what is left of the body to w.
func (r *LegBodyReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for len(r.segs) > 0 {
		n, err := w.Write(r.segs[0])
		total += int64(n)
		if err != nil {
			r.segs[0] = r.segs[0][n:]
			return total, err
		}
		r.segs = r.segs[1:]
	}
	return total, nil
}
