// Package cluster lets several Narwhal nodes act as one about engines: it runs
// protoactor-go's cluster (membership and gossip) in an actor system of its own and shares, per
// engine, the verdicts each node reaches — ejected, quarantined, probing, readmitted after a
// probe, and operators' admin actions — with their own deadlines.
//
// The package owns membership (a static seed list through its own UDP heartbeat provider, or
// etcd through its own registration, listing and watch, its etcd requests bounded), the
// verdict board (each node's live verdicts, merged latest decision first, told apart by the publishing process rather than the
// node's name, expired when no node re-publishes them — a node that still holds an engine out
// on a verdict whose node went quiet re-owns it), the choice of the one node
// that probes an engine, and the fencing of a node that stalled (it rejoins under a new member
// identity, because protoactor blocks a departed member's identity for good). It knows nothing
// of requests: the engine actors (package actors) publish their local decisions here and apply
// the peers' verdicts this package hands them. Nothing here is on the data path.
package cluster
