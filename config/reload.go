package config

import (
	"reflect"
	"strings"
)

// What a reload (SIGHUP) may change in a running router. A key listed here takes effect for
// requests that arrive after the reload (a request in flight keeps the settings it started
// with); the engine list goes through the file source like any change of the fleet. Any other
// key — a listener, the cluster, the metrics reporters, a bound the listener or the engine
// clients were built with — is fixed for the life of the process: a reload that changes one is
// refused whole, naming it, and the running configuration stays as it is.
// docs/configuration.md lists the same set ("Reload").
var reloadable = []string{
	"engines",
	"log.level",
	"request.",
	"admission.",
	"flow_control.",
	"handoff.",
	"recovery.",
	"disaggregation.",
	"placement.policy",
	"placement.prefix_block_words",
	"placement.load_factor",
	"placement.lora_affinity",
	"placement.scrape_stale_s",
	"placement.scrape_timeout_s",
	"engine_contract",
	"server.api_keys",
	"server.api_keys_file",
	"server.api_key_max_concurrency",
	"server.expose_engine_errors",
	"server.expose_routing_headers",
	"server.shutdown_grace_s",
	"server.drain_delay_s",
}

// Reloadable reports whether the key path (as Changes names it) may change while the router
// runs.
func Reloadable(path string) bool {
	for _, r := range reloadable {
		if path == r || (strings.HasSuffix(r, ".") && strings.HasPrefix(path, r)) ||
			strings.HasPrefix(path, r+".") || strings.HasPrefix(path, r+"[") {
			return true
		}
	}
	return false
}

// Changes compares the configuration next with the running one, cur: changed lists every key
// path whose value differs (a list such as engines or server.api_keys counts as one key),
// refused those of them that cannot change while the router runs (Reloadable). What the files
// a key names hold is not compared: a reload that reads server.api_keys_file again tells
// whether its keys changed (node/reload.go).
func Changes(cur, next Config) (changed, refused []string) {
	diffValues(reflect.ValueOf(cur), reflect.ValueOf(next), "", &changed)
	return changed, Refused(changed)
}

// Refused are those of the changed key paths that cannot change while the router runs.
func Refused(changed []string) []string {
	var refused []string
	for _, p := range changed {
		if !Reloadable(p) {
			refused = append(refused, p)
		}
	}
	return refused
}

// FileEngines is the file's engine list, copies that share nothing with c: what the file source
// reports (transport/discovery), so that the file's engines join the fleet like any others.
func (c Config) FileEngines() []Engine {
	out := make([]Engine, len(c.Engines))
	for i, e := range c.Engines {
		out[i] = e.Clone()
	}
	return out
}

// diffValues appends to out the YAML key path of every leaf where a and b differ. Structs are
// walked field by field (their yaml names); a nil and a non-nil pointer differ at the pointer's
// key; lists and scalars are compared whole.
func diffValues(a, b reflect.Value, path string, out *[]string) {
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			if a.IsNil() != b.IsNil() {
				*out = append(*out, path)
			}
			return
		}
		diffValues(a.Elem(), b.Elem(), path, out)
	case reflect.Struct:
		t := a.Type()
		for i := 0; i < t.NumField(); i++ {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			diffValues(a.Field(i), b.Field(i), joinPath(path, name), out)
		}
	default:
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			*out = append(*out, path)
		}
	}
}

// Clone returns a deep copy of c (its lists and optional sections): what a running router keeps
// does not change when the caller's Config does.
func (c Config) Clone() Config {
	out := c
	deepCopy(reflect.ValueOf(&out).Elem())
	return out
}

// Clone returns a copy of e that shares no list with it.
func (e Engine) Clone() Engine {
	out := e
	deepCopy(reflect.ValueOf(&out).Elem())
	return out
}

// deepCopy replaces every exported slice and pointer reachable from v with a copy.
func deepCopy(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return
		}
		cp := reflect.New(v.Type().Elem())
		cp.Elem().Set(v.Elem())
		deepCopy(cp.Elem())
		v.Set(cp)
	case reflect.Slice:
		if v.IsNil() {
			return
		}
		cp := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		reflect.Copy(cp, v)
		for i := 0; i < cp.Len(); i++ {
			deepCopy(cp.Index(i))
		}
		v.Set(cp)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				deepCopy(v.Field(i))
			}
		}
	}
}
