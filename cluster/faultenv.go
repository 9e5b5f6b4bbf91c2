package cluster

// FaultFileEnv names the cluster tests' partition hook: in a build with the clusterfaults tag
// (the tests build Narwhal with it; `make build` does not), a node started with the variable
// set behaves as if the network to its peers were cut for as long as the file it names exists
// — heartbeats are dropped both ways, every cluster connection (both directions) is closed and
// new ones fail. Without the tag the hook is not compiled in: the variable means nothing, no
// file is watched and no connection is wrapped.
const FaultFileEnv = "NARWHAL_CLUSTER_FAULT_FILE"
