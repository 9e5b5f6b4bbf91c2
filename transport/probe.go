package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// ProbeReport is what one probe transfer measured.
type ProbeReport struct {
	Prefill    time.Duration // prefill leg
	FirstToken time.Duration // decode start to first token
	Total      time.Duration
	Tokens     int
	// Descriptor is the handoff the producer made (nil for same-worker probes).
	Descriptor []byte
}

// ProbeTransfer runs a real tiny inference: a prefill on producer, the handoff validated for
// consumer, and a decode on consumer read to [DONE]. Each leg is bounded by legTimeout. When
// producer and consumer are the same engine the decode runs without transfer parameters; with
// no consumer the probe ends once the producer made a handoff. A failure comes back as a *Fault
// whose Leg says which side failed (a bad descriptor is the producer's: LegPrefill).
func ProbeTransfer(ctx context.Context, producer, consumer *EngineClient, model string, legTimeout time.Duration) (ProbeReport, error) {
	var rep ProbeReport
	body, err := wire.ParseClientBody(wire.EndpointCompletions,
		fmt.Appendf(nil, `{"model":%q,"prompt":"narwhal probe","max_tokens":2,"temperature":0}`, model))
	if err != nil {
		return rep, fmt.Errorf("probe body: %w", err)
	}
	start := time.Now()
	req := &Request{Body: body, BackendRequestID: "probe-" + uuid.NewString(), Deadline: start.Add(legTimeout)}
	res, err := producer.Prefill(ctx, req)
	if err != nil {
		return rep, err
	}
	rep.Prefill = time.Since(start)
	if producer == consumer {
		res = res.WithoutTransfer()
	} else if !res.HasDescriptor() {
		return rep, &fault.Fault{Kind: fault.MissingDescriptor, Phase: fault.PhasePrefill, Engine: producer.name,
			Detail: "the producer returned no handoff descriptor"}
	}
	rep.Descriptor = res.Descriptor()
	if consumer == nil {
		rep.Total = time.Since(start)
		return rep, nil
	}

	decodeStart := time.Now()
	req.Deadline = decodeStart.Add(legTimeout)
	stream, err := consumer.Decode(ctx, res, req)
	if err != nil {
		return rep, err
	}
	defer stream.Close()
	rep.FirstToken = stream.FirstTokenAt.Sub(decodeStart)
	for {
		ev, err := stream.Next()
		if errors.Is(err, io.EOF) {
			rep.Total = time.Since(start)
			return rep, nil
		}
		if err != nil {
			return rep, err
		}
		if ev.Kind == wire.EventToken {
			rep.Tokens++
		}
	}
}

// CheckContract validates an engine against the pinned contract: it serves the pinned model
// (with the pinned max_model_len), runs the pinned version, and is configured with the pinned
// connector. The error names the first mismatch.
func CheckContract(ctx context.Context, c *EngineClient, contract *config.EngineContract) error {
	if contract.Connector != "" && c.kv.Connector != contract.Connector {
		return fmt.Errorf("engine uses connector %q, the contract pins %q", c.kv.Connector, contract.Connector)
	}
	if contract.Model != "" || contract.MaxModelLen > 0 {
		models, err := c.Models(ctx)
		if err != nil {
			return err
		}
		found := false
		for _, m := range models {
			if contract.Model != "" && m.ID != contract.Model {
				continue
			}
			found = true
			if contract.MaxModelLen > 0 && m.MaxModelLen != contract.MaxModelLen {
				return fmt.Errorf("model %s has max_model_len %d, the contract pins %d", m.ID, m.MaxModelLen, contract.MaxModelLen)
			}
		}
		if !found {
			return fmt.Errorf("engine does not serve the pinned model %q", contract.Model)
		}
	}
	if contract.Version != "" {
		v, err := c.Version(ctx)
		if err != nil {
			return err
		}
		if v != contract.Version {
			return fmt.Errorf("engine runs version %q, the contract pins %q", v, contract.Version)
		}
	}
	return nil
}
