package node

import (
	"log/slog"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/discovery"
	"github.com/narwhal-router/narwhal/transport/discovery/dns"
	"github.com/narwhal-router/narwhal/transport/discovery/etcd"
	"github.com/narwhal-router/narwhal/transport/discovery/kubernetes"
)

// discoverySources builds the run-time engine sources the configuration's discovery section
// names (Kubernetes, DNS, etcd), beside the configuration file's own engine list and the admin
// API, which the node always runs. Nothing runs until the caller runs them; an error (no
// in-cluster configuration, an unreadable kubeconfig) stops the start, naming the key.
func discoverySources(rt config.Runtime, log *slog.Logger) ([]discovery.Source, error) {
	d := rt.Discovery
	var out []discovery.Source
	if d.Kubernetes != nil {
		k, err := kubernetes.New(*d.Kubernetes, d.RetryInitial, d.RetryMax, log)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	for _, name := range d.DNS {
		out = append(out, dns.New(name, d.RetryInitial, d.RetryMax, log))
	}
	if d.Etcd != nil {
		out = append(out, etcd.New(*d.Etcd, d.RetryInitial, d.RetryMax, log))
	}
	return out, nil
}
