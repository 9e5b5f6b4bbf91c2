package loadgen

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sync"

	json "github.com/goccy/go-json"
)

// Command is one line the driver writes to the generator's stdin.
type Command struct {
	// Op is "setup" (once, first), "run" or "quit".
	Op    string `json:"op"`
	Setup *Setup `json:"setup,omitempty"`
	Phase *Phase `json:"phase,omitempty"`
}

// Message is one line the generator writes to its stdout.
type Message struct {
	// Type is "ready" (after setup), "event" (while a phase runs), "result" (a phase's end)
	// or "error" (the command failed; the generator carries on).
	Type   string  `json:"type"`
	Event  *Event  `json:"event,omitempty"`
	Result *Result `json:"result,omitempty"`
	Error  string  `json:"error,omitempty"`
}

// Serve runs the generator's side of the protocol until "quit" or the end of in.
func Serve(in io.Reader, out io.Writer) error {
	var mu sync.Mutex
	w := bufio.NewWriterSize(out, 1<<16)
	send := func(m Message) error {
		mu.Lock()
		defer mu.Unlock()
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		if _, err := w.Write(append(b, '\n')); err != nil {
			return err
		}
		return w.Flush()
	}
	r := bufio.NewReaderSize(in, 1<<16)
	var g *Generator
	for {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) && len(line) == 0 {
			return nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		var c Command
		if err := json.Unmarshal(line, &c); err != nil {
			return fmt.Errorf("loadgen: bad command %q: %w", line, err)
		}
		switch c.Op {
		case "quit":
			return nil
		case "setup":
			if c.Setup == nil {
				err = errors.New("setup without a setup")
			} else {
				g, err = NewGenerator(*c.Setup)
			}
			if err != nil {
				err = send(Message{Type: "error", Error: err.Error()})
			} else {
				err = send(Message{Type: "ready"})
			}
		case "run":
			if g == nil || c.Phase == nil {
				err = send(Message{Type: "error", Error: "run before setup, or without a phase"})
				break
			}
			res, rerr := g.Run(*c.Phase, func(e Event) { _ = send(Message{Type: "event", Event: &e}) })
			if rerr != nil {
				err = send(Message{Type: "error", Error: rerr.Error(), Result: &res})
			} else {
				err = send(Message{Type: "result", Result: &res})
			}
		default:
			err = send(Message{Type: "error", Error: "unknown op " + c.Op})
		}
		if err != nil {
			return err
		}
	}
}
