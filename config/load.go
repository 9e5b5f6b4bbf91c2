package config

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MaxFileBytes bounds the configuration file: 16 MiB, a hundred thousand engines' worth. A
// larger file is refused rather than read.
const MaxFileBytes = 16 << 20

// Load reads, expands, strictly decodes and validates the file at path. Only a regular file of
// at most MaxFileBytes is read: a FIFO or a device in its place would block the read (or never
// end it), so it is refused with an error saying what it is.
func Load(path string) (Config, error) {
	data, err := ReadRegularFile(path, MaxFileBytes)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	cfg, err := Parse(data, os.LookupEnv)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// Parse decodes a YAML document on top of Default, then validates it. lookupEnv resolves
// `${NAME}` references in scalar values (os.LookupEnv in production). Every problem found is
// reported, each naming its line and key path. Engines' connector names are checked by
// Validate, against the registry the router runs with; the result remembers each key's line
// so that those problems name their line too.
func Parse(data []byte, lookupEnv func(string) (string, bool)) (Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return Config{}, fmt.Errorf("not valid YAML: %w", err)
	}
	cfg := Default()
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return cfg, cfg.validate()
	}
	root := doc.Content[0]
	w := &walker{lines: map[string]int{}, lookupEnv: lookupEnv, bad: map[string]bool{}}
	w.walk(root, reflect.TypeOf(cfg), "")
	// The walker removed what it refused, so the rest decodes and is validated too: one run
	// reports every problem. A value already refused is not validated again.
	if err := root.Decode(&cfg); err != nil {
		return Config{}, errors.Join(append(w.errs, fmt.Errorf("wrong type: %w", tidyYAMLError(err)))...)
	}
	for i := range cfg.Engines {
		cfg.Engines[i].applyDefaults()
	}
	cfg.Discovery.applyDefaults(func(path string) bool { _, ok := w.lines[path]; return ok })
	ck := &checker{lines: w.lines, skip: w.bad}
	if len(w.errs) > 0 {
		cfg.check(ck)
		return Config{}, errors.Join(byLine(append(w.errs, ck.errs...))...)
	}
	cfg.lines = w.lines
	return cfg, cfg.validate()
}

// ParseEngine strictly decodes one engine in the configuration's shape (an item of engines:,
// as YAML or JSON): an unknown key or a value of the wrong type is an error naming it, and
// unset keys get the engines' defaults. `${NAME}` references are refused, not expanded: an
// engine handed over at run time (the admin API) must not read the router's environment.
// The values are validated when it is provisioned (transport.Provisioner).
func ParseEngine(data []byte) (Engine, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return Engine{}, fmt.Errorf("not valid JSON or YAML: %w", err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return Engine{}, errors.New(`empty: want one engine with at least its name, url and role, as in {"name": "d4", "url": "http://10.0.0.24:8000", "role": "decode"} (JSON or YAML)`)
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return Engine{}, fmt.Errorf("%s is not an engine; want an object with the keys of an item of the engines list", describe(root))
	}
	w := &walker{lines: map[string]int{}, bad: map[string]bool{},
		lookupEnv: func(string) (string, bool) { return "", false }, noEnv: true}
	var e Engine
	w.walk(root, reflect.TypeOf(e), "")
	if len(w.errs) > 0 {
		return Engine{}, errors.Join(byLine(w.errs)...)
	}
	if err := root.Decode(&e); err != nil {
		return Engine{}, fmt.Errorf("wrong type: %w", tidyYAMLError(err))
	}
	e.applyDefaults()
	return e, nil
}

// validate checks what the file alone can tell: every value but the connector names.
func (c *Config) validate() error {
	ck := &checker{lines: c.lines}
	c.check(ck)
	return errors.Join(ck.errs...)
}

// walker checks the document alongside the Go type before anything is decoded: every mapping
// key must have a field (a misspelt key fails loudly instead of silently keeping its default),
// `${NAME}` references are expanded, and every scalar must suit its field. It records the line
// of every path for validation messages and collects every problem.
type walker struct {
	lines     map[string]int
	lookupEnv func(string) (string, bool)
	errs      []error
	bad       map[string]bool // paths whose value was refused
	// noEnv refuses `${NAME}` references instead of expanding them (ParseEngine).
	noEnv bool
}

func (w *walker) fail(line int, path, format string, args ...any) {
	w.bad[path] = true
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	w.errs = append(w.errs, fmt.Errorf("line %d: %s", line, msg))
}

var secondsType = reflect.TypeOf(Seconds(0))

func (w *walker) walk(n *yaml.Node, t reflect.Type, path string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	w.lines[path] = n.Line
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // an empty value keeps the default
	}
	switch t.Kind() {
	case reflect.Struct:
		w.walkMapping(n, t, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			w.fail(n.Line, path, "%s is not allowed here; want a list", describe(n))
			drop(n)
			return
		}
		for i, item := range n.Content {
			w.walk(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	default:
		if n.Kind != yaml.ScalarNode {
			w.fail(n.Line, path, "%s is not allowed here; want %s", describe(n), wants(t))
			drop(n)
			return
		}
		if !w.expandEnv(n, path) {
			drop(n)
			return
		}
		if err := n.Decode(reflect.New(t).Interface()); err != nil || !wholeWhereWanted(n, t) {
			w.fail(n.Line, path, "%q is not allowed; want %s", n.Value, wants(t))
			drop(n)
		}
	}
}

// walkMapping checks a mapping against the struct type t: every key must be a field, once.
func (w *walker) walkMapping(n *yaml.Node, t reflect.Type, path string) {
	fields := yamlFields(t)
	if n.Kind != yaml.MappingNode {
		w.fail(n.Line, path, "%s is not allowed here; want a mapping with the keys %s", describe(n), strings.Join(sortedKeys(fields), ", "))
		drop(n)
		return
	}
	seen := map[string]bool{}
	kept := n.Content[:0]
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		if key.Value == "<<" {
			w.fail(key.Line, "", "merge keys (<<) are not supported")
			continue
		}
		ft, ok := fields[key.Value]
		if !ok {
			w.fail(key.Line, "", "unknown key %q%s (known keys: %s)", key.Value, under(path), strings.Join(sortedKeys(fields), ", "))
			continue
		}
		if seen[key.Value] {
			w.fail(key.Line, "", "key %q appears twice%s", key.Value, under(path))
			continue
		}
		seen[key.Value] = true
		w.walk(val, ft, joinPath(path, key.Value))
		kept = append(kept, key, val)
	}
	n.Content = kept
}

// wholeWhereWanted reports whether the scalar n suits an integer field t without losing
// anything: the YAML decoder truncates a fraction into an integer field (max_inflight: 1.5
// would run as 1), so a number with a fractional part is refused here. A whole number written
// as a float (2.0, 1e3) means what it says and is kept. Fields of other kinds always pass.
func wholeWhereWanted(n *yaml.Node, t reflect.Type) bool {
	if t.Kind() < reflect.Int || t.Kind() > reflect.Uint64 || n.ShortTag() != "!!float" {
		return true
	}
	var v float64
	if err := n.Decode(&v); err != nil {
		return false
	}
	return v == math.Trunc(v)
}

// byLine orders problems by the line they name (those without a line last).
func byLine(errs []error) []error {
	line := func(err error) int {
		var n int
		if _, scanErr := fmt.Sscanf(err.Error(), "line %d:", &n); scanErr != nil {
			return 1 << 30
		}
		return n
	}
	sort.SliceStable(errs, func(i, j int) bool { return line(errs[i]) < line(errs[j]) })
	return errs
}

// drop turns a refused value into null, which leaves the field at its default when decoded.
func drop(n *yaml.Node) {
	*n = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Line: n.Line, Column: n.Column}
}

// wants says in words what a scalar field accepts.
func wants(t reflect.Type) string {
	switch {
	case t == secondsType:
		return "a number of seconds (durations are plain numbers of seconds, fractions allowed: 120, 0.5; no units)"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "a whole number (no units: 8388608, not 8MB)"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "a number"
	case t.Kind() == reflect.Bool:
		return "true or false"
	default:
		return "a string"
	}
}

// describe names what a node is, for messages about a value of the wrong shape.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	default:
		return fmt.Sprintf("%q", n.Value)
	}
}

func yamlFields(t reflect.Type) map[string]reflect.Type {
	fields := make(map[string]reflect.Type, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		if name := yamlName(t.Field(i)); name != "" {
			fields[name] = t.Field(i).Type
		}
	}
	return fields
}

func sortedKeys(m map[string]reflect.Type) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func under(path string) string {
	if path == "" {
		return " at the top level"
	}
	return " under " + path
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expandEnv replaces `${NAME}` in the scalar n at path and reports whether every variable was
// set. An unset variable is an error: a secret that silently became "" would be far worse than a
// refusal to start.
func (w *walker) expandEnv(n *yaml.Node, path string) bool {
	if !strings.Contains(n.Value, "${") {
		return true
	}
	if w.noEnv {
		w.fail(n.Line, path, "environment references (${NAME}) are not expanded here; write the value itself")
		return false
	}
	var missing []string
	n.Value = envRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
		name := ref[2 : len(ref)-1]
		v, ok := w.lookupEnv(name)
		if !ok {
			missing = append(missing, name)
		}
		return v
	})
	if len(missing) > 0 {
		w.fail(n.Line, path, "environment variable %s is not set", strings.Join(missing, ", "))
		return false
	}
	if n.Style == 0 {
		n.Tag = "" // let the expanded text resolve to its own type (a number stays a number)
	}
	return true
}

// tidyYAMLError strips the library's multi-line wrapper so the message fits one log line.
func tidyYAMLError(err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return errors.New(strings.Join(te.Errors, "; "))
	}
	return err
}

// ReadRegularFile reads the regular file at path, refusing anything else (a FIFO, a device, a
// socket, a directory) before opening it and again after (it may have been replaced between),
// and a file larger than limit bytes.
func ReadRegularFile(path string, limit int64) ([]byte, error) {
	if err := regular(path, os.Stat); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := regular(path, func(string) (os.FileInfo, error) { return f.Stat() }); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes; refused", path, limit)
	}
	return data, nil
}

// regular fails unless stat says path is a regular file.
func regular(path string, stat func(string) (os.FileInfo, error)) error {
	fi, err := stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%s); only a regular file is read", path, fileKind(fi.Mode()))
	}
	return nil
}

func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeDevice != 0 || m&os.ModeCharDevice != 0:
		return "a device"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	}
	return m.Type().String()
}
