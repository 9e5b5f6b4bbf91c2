package harness

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"time"

	json "github.com/goccy/go-json"

	"github.com/narwhal-router/narwhal/bench/loadgen"
)

// Model is the model every simulated engine serves.
const Model = "sim-model"

// FleetOptions shape a simulated fleet (flags of `narwhal sim fleet`).
type FleetOptions struct {
	Prefill, Decode int
	TTFT, ITL       time.Duration
	// Tokens is the engines' default output length; requests' max_tokens caps it.
	Tokens int
}

// Fleet is a running `narwhal sim fleet` process.
type Fleet struct {
	Proc    *Proc
	Engines []loadgen.Engine
}

// StartFleet starts the fleet and reads the JSON line describing its engines.
func StartFleet(env Env, o FleetOptions) (*Fleet, error) {
	p, err := Start(Spec{Name: "fleet", Path: env.Narwhal, Log: env.Path("fleet.log"), PipeStdout: true,
		Args: []string{"sim", "fleet", "--prefill", strconv.Itoa(o.Prefill), "--decode", strconv.Itoa(o.Decode),
			"--ttft", o.TTFT.String(), "--itl", o.ITL.String(), "--tokens", strconv.Itoa(o.Tokens), "--model", Model}})
	if err != nil {
		return nil, err
	}
	type answer struct {
		line []byte
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		br := bufio.NewReader(p.Stdout)
		line, err := br.ReadBytes('\n')
		got <- answer{line, err}
		_, _ = io.Copy(io.Discard, br) // nothing more is expected; never let the pipe fill
	}()
	select {
	case a := <-got:
		if a.err != nil {
			p.Stop(time.Second)
			return nil, fmt.Errorf("fleet: no description line (%v); log:\n%s", a.err, indent(p.Tail(10)))
		}
		var desc struct {
			Engines []loadgen.Engine `json:"engines"`
		}
		if err := json.Unmarshal(a.line, &desc); err != nil || len(desc.Engines) == 0 {
			p.Stop(time.Second)
			return nil, fmt.Errorf("fleet: cannot read its description %q: %v", a.line, err)
		}
		return &Fleet{Proc: p, Engines: desc.Engines}, nil
	case <-time.After(15 * time.Second):
		p.Stop(time.Second)
		return nil, fmt.Errorf("fleet: no description within 15 s; log:\n%s", indent(p.Tail(10)))
	}
}
