// Package cluster lets several Narwhal nodes act as one about engines: it runs
// protoactor-go's cluster (membership and gossip) in an actor system of its own and shares, per
// engine, the verdicts each node reaches — ejected, quarantined, probing, readmitted after a
// probe, and operators' admin actions — with their own deadlines.
//
// The package owns membership (a static seed list through its own UDP heartbeat provider, or
// protoactor's etcd provider), the verdict board (each node's live verdicts, merged latest
// decision first, expired when their node stops re-publishing them), the choice of the one node
// that probes an engine, and the fencing of a node that stalled (it rejoins under a new member
// identity, because protoactor blocks a departed member's identity for good). It knows nothing
// of requests: the engine actors (package actors) publish their local decisions here and apply
// the peers' verdicts this package hands them. Nothing here is on the data path.
package cluster
