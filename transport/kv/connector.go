package kv

import (
	"fmt"
	"sort"
	"strings"

	"github.com/narwhal-router/narwhal/config"

	"github.com/narwhal-router/narwhal/transport/wire"
)

// Connector is one KV transfer mechanism as the router sees it: what the producer is asked for,
// and which descriptors may be forwarded to a consumer. Adding a connector is one new file that
// implements this interface and registers itself in connectors below.
//
// The NIXL connector is sequential: the consumer's parameters come out of the producer's
// response. A connector whose legs are dispatched concurrently, such as Mooncake (the router
// picks a transfer_id and the producer's remote_bootstrap_addr up front and starts prefill and
// decode together), additionally implements ConcurrentConnector; its Validate then checks the
// planned parameters instead of a producer response.
type Connector interface {
	// Name is the value of engines[].kv.connector.
	Name() string
	// PrefillParams is the kv_transfer_params object sent to the producer.
	PrefillParams() []byte
	// Validate checks a producer's descriptor for one producer→consumer pair. It returns nil to
	// forward the descriptor unchanged, or the rejection.
	Validate(d *Descriptor, pair Pair) *Rejection
}

// ConcurrentConnector is implemented by connectors that dispatch both legs at once.
type ConcurrentConnector interface {
	Connector
	// Plan returns the parameters for both legs of one attempt before either starts.
	Plan(pair Pair, backendRequestID string) (prefillParams, decodeParams []byte)
}

// Side is one engine's KV transfer configuration.
type Side struct {
	Engine    string
	Connector string
	// EngineID is the pinned producer identity ("" = not pinned).
	EngineID string
	// Endpoint is the pinned KV side-channel host:port ("" = not pinned).
	Endpoint string
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
)

// Rejection is why a descriptor may not reach the consumer.
type Rejection struct {
	Reason string
	Detail string
}

func (r *Rejection) Error() string { return r.Reason + ": " + r.Detail }

func reject(reason, format string, args ...any) *Rejection {
	return &Rejection{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

var connectors = map[string]Connector{
	config.ConnectorNIXL: nixlConnector{},
}

// LookupConnector returns the named connector, or an error listing the known ones.
func LookupConnector(name string) (Connector, error) {
	if c, ok := connectors[name]; ok {
		return c, nil
	}
	known := make([]string, 0, len(connectors))
	for k := range connectors {
		known = append(known, k)
	}
	sort.Strings(known)
	return nil, fmt.Errorf("unknown KV connector %q (known: %s)", name, strings.Join(known, ", "))
}

// ValidateDescriptor checks d for pair: the parts every connector shares (the pair's connectors
// agree, the descriptor was made for the same API endpoint) and then the connector's own rules.
func ValidateDescriptor(d *Descriptor, pair Pair) *Rejection {
	if pair.Producer.Connector != pair.Consumer.Connector {
		return reject(ReasonConnectorMismatch, "producer %s uses connector %q but consumer %s uses %q",
			pair.Producer.Engine, pair.Producer.Connector, pair.Consumer.Engine, pair.Consumer.Connector)
	}
	if d.endpoint != pair.Endpoint {
		return reject(ReasonEndpointMismatch, "descriptor was produced for the %s endpoint, not %s",
			d.endpoint, pair.Endpoint)
	}
	c, err := LookupConnector(pair.Producer.Connector)
	if err != nil {
		return reject(ReasonConnectorMismatch, "%v", err)
	}
	return c.Validate(d, pair)
}
