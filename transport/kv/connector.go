package kv

import (
	"context"
	"fmt"

	"github.com/narwhal-router/narwhal/transport/wire"
)

// Connector is one KV transfer mechanism as the router sees it: what each leg of an attempt
// carries as kv_transfer_params, and which descriptors may be forwarded to a consumer.
//
// A sequential connector (NIXL) plans only the prefill leg: the consumer's parameters are the
// descriptor in the producer's response, and the decode leg starts once it is in and valid. A
// concurrent connector (Mooncake-style: the router picks a transfer id and the producer's
// bootstrap address up front) plans both legs: the attempt runner then starts prefill and decode
// together, and Validate checks the planned decode parameters instead of a producer response.
//
// Adding one: implement this interface in a file of this package and list it in Builtin
// (registry.go). Configuration validation, preflight, probes and client requests all find it
// there.
type Connector interface {
	// Name is the value of engines[].kv.connector.
	Name() string
	// Plan returns the transfer parameters of one attempt, before either leg starts.
	Plan(a Attempt) Transfer
	// Validate checks the consumer-bound descriptor for one producer→consumer pair: a
	// producer's response, or the planned decode parameters of a concurrent connector. It
	// returns nil to forward the descriptor unchanged, or the rejection.
	Validate(d *Descriptor, pair Pair) *Rejection
}

// Attempt is what a connector plans for: the engine pair and the attempt's backend request ID
// (the X-Request-Id both legs carry). Pair.Consumer is zero when a caller runs a prefill leg
// on its own (the standalone Go API); only sequential connectors support that.
type Attempt struct {
	Pair             Pair
	BackendRequestID string
	// ProducerRank and ConsumerRank are the data-parallel ranks the legs run on (0 for an
	// engine of one rank); a connector that addresses ranks (Mooncake) names them.
	ProducerRank, ConsumerRank int
}

// ContextPlanner is a connector that may have to ask the producer something before it can plan
// an attempt (Mooncake asks its bootstrap server for the engine id of each data-parallel rank).
// transport.Run plans through PlanContext when the producer's connector is one, and calls
// Forget after an attempt it planned failed, so that what was learned is asked again.
type ContextPlanner interface {
	Connector
	// PlanContext is Plan with the attempt's context; an error fails the attempt before either
	// leg starts (a *Rejection is the producer's bad handoff, any other error an unreachable
	// producer).
	PlanContext(ctx context.Context, a Attempt) (Transfer, error)
	// Forget has the connector learn a's producer again before its next plan.
	Forget(a Attempt)
}

// Transfer is a connector's parameters for the two legs of one attempt.
type Transfer struct {
	// Prefill is the kv_transfer_params object sent to the producer.
	Prefill []byte
	// Decode, when set, is the consumer's kv_transfer_params, planned up front: the legs run
	// concurrently. Nil for a sequential connector, whose consumer gets the producer's
	// descriptor.
	Decode []byte
	// Ranked says each leg carries the header X-data-parallel-rank: PrefillRank on the
	// producer, DecodeRank on the consumer (Mooncake's proxies always send it).
	Ranked                  bool
	PrefillRank, DecodeRank int
	// Recheck, when set, says whether the producer identity in Decode still holds: the plan
	// was made from a cached answer of the producer's bootstrap server that is being asked
	// again while the attempt runs (Mooncake, recheck.go). The attempt runner ends the attempt
	// once it finds the identity gone (IdentityCheck.AfterGone).
	Recheck IdentityCheck
}

// Concurrent says the transfer runs both legs at once.
func (p Transfer) Concurrent() bool { return p.Decode != nil }

// Side is one engine's KV transfer configuration.
type Side struct {
	Engine    string
	Connector string
	// EngineID is the pinned producer identity ("" = not pinned).
	EngineID string
	// Endpoint is the pinned KV side-channel host:port ("" = not pinned).
	Endpoint string
	// Host is the engine's own host, from its url: an unpinned producer's KV host must be it,
	// unless AllowedEndpoints (CIDRs, host:port entries) says where else it may point.
	Host             string
	AllowedEndpoints []string
	// AllowedPorts are the ports an unpinned producer's descriptor may name on its own host or
	// on a host an AllowedEndpoints CIDR covers; none: DefaultAllowedPorts. ReservedPorts (the
	// router's own listeners) are never allowed there, whatever AllowedPorts says.
	AllowedPorts  []PortRange
	ReservedPorts []int
	// TransferModes lists the transfer_mode values the engine accepts as a consumer.
	TransferModes []string
}

// Pair is what a descriptor is validated against: who produced it, who will consume it, and the
// API endpoint of the decode call.
type Pair struct {
	Producer Side
	Consumer Side
	Endpoint wire.Endpoint
}

// Rejection reasons; each is a metric tag value and appears in the client's error detail.
const (
	ReasonMissingEngineIdentity = "missing_engine_identity"
	ReasonMalformedBlockIDs     = "malformed_block_ids"
	ReasonConnectorMismatch     = "connector_mismatch"
	ReasonEndpointMismatch      = "endpoint_mismatch"
	// ReasonDescriptorTooLarge is a descriptor past the 1 MiB bound: neither a connector
	// mismatch nor malformed, just more than any connector sends.
	ReasonDescriptorTooLarge = "descriptor_too_large"
)

// Rejection is why a descriptor may not reach the consumer.
type Rejection struct {
	Reason string
	Detail string
}

func (r *Rejection) Error() string { return r.Reason + ": " + r.Detail }

// Reject makes a rejection; connectors outside this package use it too.
func Reject(reason, format string, args ...any) *Rejection {
	return &Rejection{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// ValidateDescriptor checks d for pair: the parts every connector shares (the pair's connectors
// agree, the descriptor was made for the same API endpoint) and then c's own rules; c is the
// producer's connector.
func ValidateDescriptor(c Connector, d *Descriptor, pair Pair) *Rejection {
	if pair.Producer.Connector != pair.Consumer.Connector {
		return Reject(ReasonConnectorMismatch, "producer %s uses connector %q but consumer %s uses %q",
			pair.Producer.Engine, pair.Producer.Connector, pair.Consumer.Engine, pair.Consumer.Connector)
	}
	if d.endpoint != pair.Endpoint {
		return Reject(ReasonEndpointMismatch, "descriptor was produced for the %s endpoint, not %s",
			d.endpoint, pair.Endpoint)
	}
	if c.Name() != pair.Producer.Connector {
		return Reject(ReasonConnectorMismatch, "descriptor of connector %q checked as %q", pair.Producer.Connector, c.Name())
	}
	return c.Validate(d, pair)
}
