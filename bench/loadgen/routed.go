package loadgen

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// routedArm sends one streaming chat request to the router and reads it to its outcome.
type routedArm struct {
	hc  *fasthttp.HostClient
	uri string
}

var readers = sync.Pool{New: func() any { return &sseReader{br: bufio.NewReaderSize(nil, 8192)} }}

func newRoutedArm(addr string, maxConns int, guard time.Duration) *routedArm {
	return &routedArm{
		uri: "http://" + addr + "/v1/chat/completions",
		hc: &fasthttp.HostClient{
			Addr:                addr,
			Name:                "narwhal-bench",
			MaxConns:            maxConns,
			StreamResponseBody:  true,
			MaxIdleConnDuration: time.Minute,
			// A deadline on the whole response: the generator's guard. The router owes every
			// request an outcome long before.
			ReadTimeout:  guard,
			WriteTimeout: guard,
		},
	}
}

// hooks let a hold phase follow its streams: firstToken runs when a stream's first generated
// token arrives, ended when that stream ends; release, polled after every event, tells the
// request to hang up.
type hooks struct {
	firstToken, ended func()
	release           func() bool
}

// do runs one request that started at start, as flow f's when f is not nil.
func (r *routedArm) do(start time.Time, body []byte, maxTokens int, h *hooks, f *Flow) Outcome {
	o := Outcome{Started: start}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI(r.uri)
	req.Header.SetContentType("application/json")
	req.SetBodyRaw(body)
	if f != nil && f.Key != "" {
		req.Header.Set("Authorization", "Bearer "+f.Key)
	}
	if f != nil && f.Band != "" {
		req.Header.Set(BandHeader, f.Band)
	}
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)

	if err := r.hc.Do(req, resp); err != nil {
		o.Violation = "no response (" + netErrClass(err) + ")"
		return o
	}
	defer resp.CloseBodyStream()
	o.TTFT = serverTimingDur(resp.Header.Peek("Server-Timing"), "ttft")
	if a := resp.Header.Peek("x-narwhal-attempts"); len(a) > 0 {
		o.Attempts, _ = strconv.Atoi(string(a))
	}
	var stream io.Reader = resp.BodyStream()
	if stream == nil {
		stream = bytes.NewReader(resp.Body())
	}
	if status := resp.StatusCode(); status != fasthttp.StatusOK {
		b, err := io.ReadAll(io.LimitReader(stream, 64<<10))
		if err != nil {
			o.Violation = "an error response cut short (" + netErrClass(err) + ")"
			return o
		}
		o.Error = "http " + strconv.Itoa(status) + " " + errorCode(b)
		return o
	}
	if ct := resp.Header.ContentType(); !bytes.HasPrefix(ct, []byte("text/event-stream")) {
		o.Violation = "a 200 that is not an event stream"
		return o
	}

	sr := readers.Get().(*sseReader)
	sr.br.Reset(stream)
	defer func() { sr.br.Reset(nil); readers.Put(sr) }()
	var chk streamCheck
	var readErr error
	for {
		data, err := sr.next()
		if err != nil {
			readErr = err
			break
		}
		if chk.event(data) && chk.tokens == 1 {
			o.FirstByte = time.Since(start)
			if h != nil {
				h.firstToken()
				defer h.ended()
			}
		}
		if chk.done && o.Total == 0 {
			o.Total = time.Since(start)
		}
		if h != nil && !chk.done && chk.errCode == "" && h.release() {
			o.Tokens, o.Released = chk.tokens, true
			return o // closing the unfinished body stream drops the connection: the router sees a hang-up
		}
	}
	o.Tokens = chk.tokens
	o.OK, o.Error, o.Violation = chk.end(readErr, maxTokens)
	if o.Violation != "" && readErr != nil && !errors.Is(readErr, io.EOF) {
		o.Violation += " (" + netErrClass(readErr) + ")"
	}
	return o
}

// serverTimingDur reads `name;dur=<ms>` from a Server-Timing header.
func serverTimingDur(h []byte, name string) time.Duration {
	i := bytes.Index(h, []byte(name+";dur="))
	if i < 0 {
		return 0
	}
	v := h[i+len(name)+5:]
	j := 0
	for j < len(v) && (v[j] == '.' || (v[j] >= '0' && v[j] <= '9')) {
		j++
	}
	ms, err := strconv.ParseFloat(string(v[:j]), 64)
	if err != nil {
		return 0
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// netErrClass gives a transport error a short, countable name.
func netErrClass(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout()):
		return "generator guard timed out"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
		return "connection reset"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, fasthttp.ErrConnectionClosed):
		return "connection closed"
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return "generator out of connections"
	case errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE):
		return "generator out of file descriptors"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "out of ephemeral ports"
	}
	return err.Error()
}
