package node

import (
	"log/slog"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/discovery"
)

// discoverySources builds the run-time engine sources the configuration's discovery section
// names (Kubernetes, DNS, etcd), beside the configuration file's own engine list and the admin
// API, which the node always runs.
func discoverySources(rt config.Runtime, log *slog.Logger) ([]discovery.Source, error) {
	return nil, nil
}
