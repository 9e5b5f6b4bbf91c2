package config

import (
	"fmt"
	"strings"
)

// ClientAPIKeys returns the client API keys: server.api_keys followed by the lines of
// server.api_keys_file (blank lines and '#' comments skipped). The file is read on every call:
// validation reads it to check it, provisioning (node.Provision) once more for the keys the
// listener takes, at start and at each reload.
func (s Server) ClientAPIKeys() ([]string, error) {
	keys := append([]string(nil), s.APIKeys...)
	if s.APIKeysFile == "" {
		return keys, nil
	}
	b, err := ReadRegularFile(s.APIKeysFile, MaxFileBytes) // a FIFO here would block a reload
	if err != nil {
		return nil, fmt.Errorf("server.api_keys_file: %w", err)
	}
	found := 0
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.ContainsAny(line, " \t") {
			return nil, fmt.Errorf("server.api_keys_file: %s line %d: a key may not contain spaces", s.APIKeysFile, i+1)
		}
		keys = append(keys, line)
		found++
	}
	if found == 0 {
		// An empty file must not turn client authentication off (fail closed).
		return nil, fmt.Errorf("server.api_keys_file: %s holds no key (only blank lines and comments); list at least one key, or leave the setting out", s.APIKeysFile)
	}
	return keys, nil
}

// checkAPIKeys records the problems of the client API key settings. A key's value never
// appears in a message: only its position does.
func (ck *checker) checkAPIKeys(s Server) {
	seen := map[string]int{}
	for i, k := range s.APIKeys {
		path := fmt.Sprintf("server.api_keys[%d]", i)
		switch {
		case k == "":
			ck.fail(path, "is empty; a key must be a non-empty string without spaces")
		case strings.ContainsAny(k, " \t\r\n"):
			ck.fail(path, "contains whitespace; a key must be a non-empty string without spaces")
		default:
			if j, dup := seen[k]; dup {
				ck.fail(path, "repeats server.api_keys[%d]; list each key once", j)
			}
			seen[k] = i
		}
	}
	if s.APIKeysFile != "" {
		if _, err := s.ClientAPIKeys(); err != nil {
			ck.fail("server.api_keys_file", "%q cannot be used: %v", s.APIKeysFile, err)
		}
	}
	if s.APIKeyMaxConcurrency < 0 {
		ck.fail("server.api_key_max_concurrency", "must be 0 (unbounded) or a number of requests, got %d", s.APIKeyMaxConcurrency)
	}
}
