package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Secrets fail closed. A secret key written in the file but resolving to nothing — `""`, or a
// `${NAME}` whose variable is set but empty — is a mistake that would otherwise silently turn
// its protection off (an admin listener without a token, an engine asked without its key), so
// it is refused, naming the key; leaving a key out is how to go without it. A key file must
// hold at least one key. A secret's value never appears in a message.

// secretKeys are the secret keys written in the file (lines records every key path Parse saw),
// with their values: what checkSecrets examines.
func (c *Config) secretKeys() map[string]string {
	out := map[string]string{"server.admin_token": c.Server.AdminToken, "server.api_keys_file": c.Server.APIKeysFile}
	for i, e := range c.Engines {
		out[fmt.Sprintf("engines[%d].api_key", i)] = e.APIKey
	}
	for i, t := range c.FlowControl.Tenants {
		for j, k := range t.APIKeys {
			out[fmt.Sprintf("flow_control.tenants[%d].api_keys[%d]", i, j)] = k
		}
	}
	return out
}

// checkSecrets records every secret that resolved to nothing, or to something with whitespace
// around it (a key copied with its newline is a key nobody can send).
func (ck *checker) checkSecrets(c *Config) {
	secrets := c.secretKeys()
	for _, path := range slices.Sorted(maps.Keys(secrets)) {
		v := secrets[path]
		_, written := ck.lines[path]
		switch {
		case v == "" && written:
			ck.fail(path, "is empty (an empty value, or a ${NAME} whose variable is set but empty); a secret that resolves to nothing would turn its protection off, so leave the key out to go without it")
		case v != "" && strings.TrimSpace(v) == "":
			ck.fail(path, "is only whitespace; a secret must not be blank")
		case v != strings.TrimSpace(v) && path != "server.api_keys_file":
			ck.fail(path, "has whitespace around it (a copied newline?); a secret must not begin or end with whitespace")
		}
	}
}
