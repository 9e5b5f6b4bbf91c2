package transport

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http/httputil"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// countingReader counts the reads the buffer above it makes.
type countingReader struct {
	r     io.Reader
	reads int
}

func (c *countingReader) Read(p []byte) (int, error) { c.reads++; return c.r.Read(p) }

func sampleEvents(rng *rand.Rand, n int) [][]byte {
	var evs [][]byte
	for i := range n {
		text := bytes.Repeat([]byte("x"), rng.IntN(300))
		evs = append(evs, fmt.Appendf(nil, "data: {\"choices\":[{\"text\":\"%d %s\"}]}\n\n", i, text))
		if rng.IntN(5) == 0 {
			evs = append(evs, []byte(": keep-alive\r\n\r\n"))
		}
	}
	return append(evs, []byte("data: [DONE]\n\n"))
}

// chunked frames body in chunks of random sizes (some with extensions), with a trailer.
func chunked(rng *rand.Rand, body []byte) []byte {
	var out bytes.Buffer
	for len(body) > 0 {
		n := min(len(body), 1+rng.IntN(400))
		if rng.IntN(4) == 0 {
			fmt.Fprintf(&out, "%X;ext=%d\r\n", n, n)
		} else {
			fmt.Fprintf(&out, "%x\r\n", n)
		}
		out.Write(body[:n])
		out.WriteString("\r\n")
		body = body[n:]
	}
	out.WriteString("0\r\nX-Trailer: 1\r\n\r\n")
	return out.Bytes()
}

func readEvents(t *testing.T, b *streamBody) ([][]byte, error) {
	t.Helper()
	r := wire.NewEventReader(b)
	var got [][]byte
	for {
		ev, err := r.Next()
		if err != nil {
			return got, err
		}
		got = append(got, append([]byte(nil), ev...))
	}
}

// The SSE reader over the connection's own buffer returns exactly the events of the unframed
// body, whatever the chunking, for a chunked, a fixed-length and a read-to-close body.
func TestStreamBodyUndoesFraming(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		evs := sampleEvents(rng, 1+rng.IntN(20))
		plain := bytes.Join(evs, nil)
		for _, mode := range []string{"chunked", "length", "close", "httputil"} {
			wire := plain
			contentLength := len(plain)
			switch mode {
			case "chunked":
				wire, contentLength = chunked(rng, plain), -1
			case "close":
				contentLength = -2
			case "httputil":
				var buf bytes.Buffer
				cw := httputil.NewChunkedWriter(&buf)
				for _, ev := range evs {
					_, _ = cw.Write(ev)
				}
				_ = cw.Close()
				buf.WriteString("\r\n")
				wire, contentLength = buf.Bytes(), -1
			}
			// Something after the body (the next response on a kept-alive connection) stays unread.
			next := []byte("HTTP/1.1 200 OK\r\n")
			cr := &countingReader{r: io.MultiReader(bytes.NewReader(wire), bytes.NewReader(next))}
			if mode == "close" {
				cr.r = bytes.NewReader(wire)
			}
			br := bufio.NewReaderSize(cr, 16+rng.IntN(2048))
			var b streamBody
			b.reset(br, contentLength)
			got, err := readEvents(t, &b)
			if !errors.Is(err, io.EOF) {
				t.Fatalf("round %d %s: ended with %v after %d of %d events", round, mode, err, len(got), len(evs))
			}
			if !bytes.Equal(bytes.Join(got, nil), plain) || len(got) != len(evs) {
				t.Fatalf("round %d %s: events differ:\n got %q\nwant %q", round, mode, got, evs)
			}
			if mode != "close" {
				rest, _ := io.ReadAll(br)
				if !bytes.Equal(rest, next) {
					t.Fatalf("round %d %s: the body's reader consumed past its end: left %q", round, mode, rest)
				}
			}
		}
	}
}

// A chunked body cut anywhere before its last chunk is a truncation, never a clean end.
func TestStreamBodyTruncatedIsNeverAnEnd(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	plain := bytes.Join(sampleEvents(rng, 4), nil)
	full := chunked(rng, plain)
	end := bytes.LastIndex(full, []byte("0\r\n"))
	for cut := range end + 1 {
		br := bufio.NewReaderSize(bytes.NewReader(full[:cut]), 64)
		var b streamBody
		b.reset(br, -1)
		r := wire.NewEventReader(&b)
		var err error
		for err == nil {
			_, err = r.Next()
		}
		if errors.Is(err, io.EOF) {
			t.Fatalf("cut at %d of %d: a clean end (%v)", cut, len(full), err)
		}
	}
	// and a fixed-length body cut short
	br := bufio.NewReaderSize(bytes.NewReader(plain[:len(plain)-3]), 64)
	var b streamBody
	b.reset(br, len(plain))
	if _, err := io.ReadAll(&b); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short fixed-length body: %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestStreamBodyRejectsBadFraming(t *testing.T) {
	for _, in := range []string{
		"zz\r\ndata: x\n\n\r\n0\r\n\r\n",       // not hex
		"5\r\ndata:XX\r\n0\r\n\r\n",            // data longer than the chunk: no CRLF after it
		"1234567890abcdef0\r\n",                // size overflows
		"\r\n",                                 // empty size line
		"4\r\ndata" + string(make([]byte, 70)), // no CRLF, then a framing line over the buffer
	} {
		br := bufio.NewReaderSize(bytes.NewReader([]byte(in)), 64)
		var b streamBody
		b.reset(br, -1)
		_, err := io.ReadAll(&b)
		if !errors.Is(err, errBadChunk) {
			t.Errorf("%q: %v, want a malformed-chunk error", in, err)
		}
	}
}

// Buffered counts body, not framing: an event's chunk followed by the next whole chunk is more
// to batch; one followed only by the CRLF, the last chunk or half a size line is not.
func TestStreamBodyBufferedIsBodyOnly(t *testing.T) {
	ev := "data: {\"choices\":[{\"text\":\"a\"}]}\n\n"
	chunk := fmt.Sprintf("%x\r\n%s\r\n", len(ev), ev)
	for _, c := range []struct {
		after    string
		buffered bool
	}{
		{chunk, true},
		{"", false},
		{"0\r\n\r\n", false},
		{"2", false},
		{fmt.Sprintf("%x\r\n", len(ev)), false},
		{fmt.Sprintf("%x\r\nd", len(ev)), true},
	} {
		in := chunk[:len(chunk)-2] // the first chunk without its CRLF…
		in += "\r\n" + c.after     // …which comes with what follows
		cr := &countingReader{r: bytes.NewReader([]byte(in))}
		br := bufio.NewReaderSize(cr, 4096)
		var b streamBody
		b.reset(br, -1)
		r := wire.NewEventReader(&b)
		if got, err := r.Next(); err != nil || string(got) != ev {
			t.Fatalf("first event %q, %v", got, err)
		}
		if got := r.Buffered(); got != c.buffered {
			t.Errorf("after an event, with %q in the buffer: Buffered %v, want %v", c.after, got, c.buffered)
		}
		if got, want := b.eventBuffered(), c.after == chunk; got != want {
			t.Errorf("after an event, with %q in the buffer: a whole event buffered %v, want %v", c.after, got, want)
		}
		if c.buffered {
			reads := cr.reads
			if _, err := b.ReadSlice('\n'); err != nil && !errors.Is(err, bufio.ErrBufferFull) {
				t.Fatal(err)
			}
			if cr.reads != reads {
				t.Errorf("with %q buffered, the next read of body went to the connection", c.after)
			}
		}
	}
}

// An engine whose chunked framing is broken after the first token fails the stream as a bad
// response (not a silent close), with the events before it relayed.
func TestDecodeMalformedChunkIsBadResponse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ev := "data: {\"choices\":[{\"index\":0,\"text\":\" a\",\"finish_reason\":null}]}\n\n"
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 64<<10)
		_, _ = c.Read(buf) // the decode request (small: one read)
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\nzz\r\n", len(ev), ev)
		_, _ = c.Read(buf) // until the router gives up on the connection
	}()
	client := ClientFor(t, config.Engine{Name: "d0", URL: "http://" + ln.Addr().String(), Role: config.RoleDecode}, nil)
	body, err := wire.ParseClientBody(wire.EndpointCompletions, []byte(`{"model":"m","prompt":"p","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := client.Decode(context.Background(), PrefillResult{}, &Request{Body: body, BackendRequestID: "b", Deadline: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := s.Next(); err != nil || string(got.Raw) != ev {
		t.Fatalf("first event %q, %v", got.Raw, err)
	}
	_, err = s.Next()
	if f, ok := fault.As(err); !ok || f.Kind != fault.BadResponse {
		t.Fatalf("after a malformed chunk: %v, want a bad_response fault", err)
	}
}
