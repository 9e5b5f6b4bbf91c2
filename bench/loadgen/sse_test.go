package loadgen

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func chunk(content string) string {
	return `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` +
		content + `"},"logprobs":null,"finish_reason":null}]}` + "\n\n"
}

const roleDelta = `data: {"id":"chatcmpl-1","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n"

func check(t *testing.T, stream string, want int) (bool, string, string) {
	t.Helper()
	r := &sseReader{br: bufio.NewReaderSize(strings.NewReader(stream), 64)}
	var c streamCheck
	var err error
	for {
		var data []byte
		if data, err = r.next(); err != nil {
			break
		}
		c.event(data)
	}
	return c.end(err, want)
}

func TestStreamOutcomes(t *testing.T) {
	ok3 := roleDelta + chunk(" alpha") + chunk(" beta") + chunk(" gamma")
	errEvent := `data: {"error":{"message":"stream closed before [DONE]","type":"bad_gateway","param":null,"code":"closed_early"}}` + "\n\n"
	cases := []struct {
		name      string
		stream    string
		want      int
		ok        bool
		errClass  string
		violation string
	}{
		{name: "complete", stream: ok3 + "data: [DONE]\n\n", want: 3, ok: true},
		{name: "comments and CRLF", stream: ": ping\r\n\r\n" + strings.ReplaceAll(ok3, "\n", "\r\n") + "data: [DONE]\r\n\r\n", want: 3, ok: true},
		{name: "short", stream: ok3 + "data: [DONE]\n\n", want: 4, errClass: "short output"},
		{name: "terminal error event", stream: roleDelta + chunk(" alpha") + errEvent, want: 3, errClass: "sse_error closed_early"},
		{name: "numeric error code", stream: `data: {"error":{"message":"x","type":"y","param":null,"code":503}}` + "\n\n", want: 3, errClass: "sse_error 503"},
		{name: "error then done", stream: chunk(" alpha") + errEvent + "data: [DONE]\n\n", want: 3, violation: "[DONE] after an error event"},
		{name: "two errors", stream: chunk(" alpha") + errEvent + errEvent, want: 3, violation: "two error events"},
		{name: "events after done", stream: ok3 + "data: [DONE]\n\n" + chunk(" delta"), want: 3, violation: "events after [DONE]"},
		{name: "truncated", stream: ok3, want: 3, violation: "the stream ended without [DONE] or an error event"},
		{name: "cut mid-event", stream: ok3 + "data: {\"choi", want: 3, violation: "the stream broke without [DONE] or an error event"},
		{name: "repeated token (a retry after commit)", stream: roleDelta + chunk(" alpha") + chunk(" alpha") + chunk(" beta") + "data: [DONE]\n\n", want: 3, violation: "a token out of order or repeated"},
		{name: "second role delta", stream: roleDelta + chunk(" alpha") + roleDelta + chunk(" beta") + "data: [DONE]\n\n", want: 2, violation: "a second role delta (output of two attempts)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ok, errClass, violation := check(t, tc.stream, tc.want)
			if ok != tc.ok || errClass != tc.errClass || violation != tc.violation {
				t.Fatalf("got ok=%v error=%q violation=%q; want ok=%v error=%q violation=%q",
					ok, errClass, violation, tc.ok, tc.errClass, tc.violation)
			}
		})
	}
}

func TestSSEReaderLongLinesAndMultiLineData(t *testing.T) {
	long := strings.Repeat("x", 300)
	r := &sseReader{br: bufio.NewReaderSize(strings.NewReader("data: "+long+"\n\nevent: e\ndata: a\ndata: b\n\n"), 16)}
	d, err := r.next()
	if err != nil || string(d) != long {
		t.Fatalf("long line: %q %v", d, err)
	}
	d, err = r.next()
	if err != nil || string(d) != "a\nb" {
		t.Fatalf("multi-line data: %q %v", d, err)
	}
	if _, err = r.next(); !errors.Is(err, io.EOF) {
		t.Fatalf("end: %v", err)
	}
}

func TestServerTiming(t *testing.T) {
	h := []byte("ttft;dur=20.512, first_byte;dur=41.250")
	if got := serverTimingDur(h, "ttft"); got != 20512*time.Microsecond {
		t.Fatalf("ttft %v", got)
	}
	if got := serverTimingDur(h, "first_byte"); got != 41250*time.Microsecond {
		t.Fatalf("first_byte %v", got)
	}
	if got := serverTimingDur([]byte("ttft, first_byte"), "ttft"); got != 0 {
		t.Fatalf("absent: %v", got)
	}
}

func TestErrorCode(t *testing.T) {
	for body, want := range map[string]string{
		`{"error":{"message":"m","type":"t","param":null,"code":"queue_full"}}`: "queue_full",
		`{"error":{"message":"m","type":"t","param":null,"code":500}}`:          "500",
		`{"error":{"message":"m","type":"t","param":null,"code":null}}`:         "unknown",
		`not json`: "unknown",
	} {
		if got := errorCode([]byte(body)); got != want {
			t.Errorf("%s: got %q, want %q", body, got, want)
		}
	}
}
