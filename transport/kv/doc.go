// Package kv owns the KV-cache handoff between the two legs: the producer's descriptor (indexed,
// never re-encoded, validated against the producer→consumer pair), the Connector interface a
// transfer mechanism implements (what each leg carries, planned per attempt, sequential or
// concurrent), NIXL, Mooncake (whose plan asks the producer's bootstrap server first:
// ContextPlanner; a cached answer not confirmed lately is rechecked while the attempt planned
// on it runs, and the attempt ends once its engine id is found gone: IdentityCheck), and the
// explicit Registry of connectors engines may name.
//
// Adding a connector: implement Connector in a new file of this package (nixl.go is the example)
// and list it in Builtin (registry.go). Provisioning (node.Provision, which validates the
// configuration, and transport.Provisioner, which every engine goes through) checks every
// engines[].kv.connector against the registry the router runs with, and preflight, probes and
// client requests all run the connector's plan through the one attempt runner, so nothing else
// names it. A connector of a program's own (tests/connector_test.go has one) is provisioned
// with kv.Builtin().With(c) instead.
package kv
