// Package config owns Narwhal's YAML contract: the types every other package reads, their
// documented defaults, strict parsing (an unknown key is an error naming the key and its line),
// `${NAME}` environment expansion and validation with messages that say what is allowed.
//
// Each section is one type in a file of its own (server.go, placement.go, recovery.go, ...)
// with its defaults and its checks beside its fields; Config.check runs the sections in order.
//
// Durations are written in seconds (`*_s` keys, fractions allowed) because that is how operators
// read dashboards; the Go side reads them through Seconds.Duration.
package config

import "time"

// Config is the whole configuration file. The zero value is not useful: call Default or Load.
type Config struct {
	Server         Server          `yaml:"server"`
	Request        Request         `yaml:"request"`
	Admission      Admission       `yaml:"admission"`
	FlowControl    FlowControl     `yaml:"flow_control"`
	Engine         EngineTimeouts  `yaml:"engine"`
	Handoff        Handoff         `yaml:"handoff"`
	Disaggregation Disaggregation  `yaml:"disaggregation"`
	Placement      Placement       `yaml:"placement"`
	Recovery       Recovery        `yaml:"recovery"`
	EngineContract *EngineContract `yaml:"engine_contract"`
	Preflight      Preflight       `yaml:"preflight"`
	Engines        []Engine        `yaml:"engines"`
	Metrics        Metrics         `yaml:"metrics"`
	Tracing        Tracing         `yaml:"tracing"`
	Log            Log             `yaml:"log"`
	Cluster        Cluster         `yaml:"cluster"`
	Discovery      Discovery       `yaml:"discovery"`

	// lines maps each key path the file set to its line (Parse fills it), so that problems
	// found later (Validate, with the connector registry) still name their line.
	lines map[string]int
}

// Seconds is a duration written as (possibly fractional) seconds.
type Seconds float64

// Duration converts s to a time.Duration.
func (s Seconds) Duration() time.Duration { return time.Duration(float64(s) * float64(time.Second)) }

// Default returns the documented defaults (docs/configuration.md lists them); each section's
// are beside its fields.
func Default() Config {
	return Config{
		Server:         defaultServer(),
		Request:        defaultRequest(),
		Admission:      defaultAdmission(),
		FlowControl:    defaultFlowControl(),
		Engine:         defaultEngineTimeouts(),
		Handoff:        defaultHandoff(),
		Disaggregation: defaultDisaggregation(),
		Placement:      defaultPlacement(),
		Recovery:       defaultRecovery(),
		Preflight:      defaultPreflight(),
		Tracing:        defaultTracing(),
		Log:            defaultLog(),
		Cluster:        defaultCluster(),
		Discovery:      defaultDiscovery(),
	}
}
