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
func discoverySources(d config.Discovery, log *slog.Logger) ([]discovery.Source, error) {
	retryInitial, retryMax := d.RetryInitialS.Duration(), d.RetryMaxS.Duration()
	var out []discovery.Source
	if d.Kubernetes != nil {
		k, err := kubernetes.New(*d.Kubernetes, retryInitial, retryMax, log)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	for _, name := range d.DNS {
		out = append(out, dns.New(name, retryInitial, retryMax, log))
	}
	if d.Etcd != nil {
		out = append(out, etcd.New(*d.Etcd, retryInitial, retryMax, log))
	}
	return out, nil
}
