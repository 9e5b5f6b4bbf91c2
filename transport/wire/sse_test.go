package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/goccy/go-json"
)

// events reads every event of an SSE body with the router's reader.
func events(t *testing.T, body []byte, bufSize int) ([][]byte, error) {
	t.Helper()
	r := EventReader{br: bufio.NewReaderSize(bytes.NewReader(body), bufSize)}
	var out [][]byte
	for {
		ev, err := r.Next()
		if err != nil {
			return out, err
		}
		out = append(out, append([]byte(nil), ev...))
	}
}

func TestSSEReaderKeepsEventsByteForByte(t *testing.T) {
	for _, name := range []string{"completions-stream.sse", "chat-stream.sse", "chat-stream-tool-call.sse", "stream-error.sse"} {
		t.Run(name, func(t *testing.T) {
			raw := append(fixture(t, name), "\n\n"...)
			for _, size := range []int{16, 64, 4096} { // events longer than the buffer too
				evs, err := events(t, raw, size)
				if !errors.Is(err, io.EOF) {
					t.Fatalf("buffer %d: %v", size, err)
				}
				if joined := bytes.Join(evs, nil); !bytes.Equal(joined, raw) {
					t.Fatalf("buffer %d: events do not add up to the stream", size)
				}
			}
		})
	}
}

func TestSSEReaderReportsAStreamCutMidEvent(t *testing.T) {
	_, err := events(t, []byte("data: {\"a\":1}\n\ndata: {\"b\""), 4096)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestClassifyVLLMChunks(t *testing.T) {
	kinds := func(name string) []EventKind {
		evs, _ := events(t, append(fixture(t, name), "\n\n"...), 4096)
		var out []EventKind
		for _, ev := range evs {
			out = append(out, Classify(EventData(ev)))
		}
		return out
	}
	cases := []struct {
		name string
		want []EventKind
	}{
		{"completions-stream.sse", []EventKind{EventToken, EventToken, EventToken, EventUsage, EventDone}},
		{"chat-stream.sse", []EventKind{EventMeta, EventToken, EventToken, EventToken, EventUsage, EventDone}},
		{"chat-stream-tool-call.sse", []EventKind{EventMeta, EventToken, EventToken, EventToken, EventToken, EventDone}},
		{"stream-error.sse", []EventKind{EventToken, EventError, EventDone}},
		{"stream-error-old.sse", []EventKind{EventError, EventDone}},
	}
	for _, tc := range cases {
		got := kinds(tc.name)
		if len(got) != len(tc.want) {
			t.Fatalf("%s: kinds %v, want %v", tc.name, got, tc.want)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Fatalf("%s: event %d is %v, want %v", tc.name, i, got[i], tc.want[i])
			}
			// After the first token the fast path must agree on everything the relay acts on.
			if fast := ClassifyFast(EventData(mustEvent(t, tc.name, i))); i > 0 && (fast == EventDone) != (got[i] == EventDone) ||
				(fast == EventError) != (got[i] == EventError) || (fast == EventUsage) != (got[i] == EventUsage) {
				t.Fatalf("%s: event %d fast kind %v, full kind %v", tc.name, i, fast, got[i])
			}
		}
	}
}

func mustEvent(t *testing.T, name string, i int) []byte {
	evs, _ := events(t, append(fixture(t, name), "\n\n"...), 4096)
	return evs[i]
}

func TestStreamErrorsKeepTheirOwnStatus(t *testing.T) {
	for name, want := range map[string]int{"stream-error.sse": 500, "stream-error-old.sse": 400} {
		evs, _ := events(t, append(fixture(t, name), "\n\n"...), 4096)
		for _, ev := range evs {
			if d := EventData(ev); IsErrorData(d) {
				if se := ParseStreamError(d); se.Status != want || se.Message == "" {
					t.Fatalf("%s: %+v, want status %d", name, se, want)
				}
			}
		}
	}
}

func TestAssemblerMergesToolCallDeltas(t *testing.T) {
	a := NewAssembler(EndpointChat)
	evs, _ := events(t, append(fixture(t, "chat-stream-tool-call.sse"), "\n\n"...), 4096)
	for _, ev := range evs {
		if d := EventData(ev); !bytes.Equal(d, doneData) {
			a.Add(d)
		}
	}
	out, err := a.Body()
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Choices []struct {
			Message struct {
				Role      string  `json:"role"`
				Content   *string `json:"content"`
				ToolCalls []struct {
					ID       string `json:"id"`
					Type     string `json:"type"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	c := r.Choices[0]
	if r.ID != "chatcmpl-77" || r.Object != "chat.completion" || c.FinishReason != "tool_calls" || c.Message.Content != nil ||
		len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].ID != "chatcmpl-tool-1f2e" ||
		c.Message.ToolCalls[0].Function.Name != "get_weather" || c.Message.ToolCalls[0].Function.Arguments != `{"city": "Oslo"}` {
		t.Fatalf("assembled %s", out)
	}
}

func TestAssemblerConcatenatesTextAndKeepsUsage(t *testing.T) {
	a := NewAssembler(EndpointCompletions)
	evs, _ := events(t, append(fixture(t, "completions-stream.sse"), "\n\n"...), 4096)
	for _, ev := range evs {
		if d := EventData(ev); !bytes.Equal(d, doneData) {
			a.Add(d)
		}
	}
	out, _ := a.Body()
	for _, want := range []string{`"text":" Disaggregated prefill"`, `"finish_reason":"length"`, `"completion_tokens":3`, `"object":"text_completion"`} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("%s missing from %s", want, out)
		}
	}
}
