package config

import (
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxHostLength bounds the host of an engine URL: 253 bytes, the longest DNS name (RFC 1035's
// 255 octets on the wire, less the length and root bytes). A longer one is no address an engine
// can have, only a way to make every log line that names it large.
const MaxHostLength = 253

// engineURL checks an engine's base URL, from whichever source: http or https, a host of at
// most MaxHostLength bytes, no path, query or credentials. A URL naming credentials
// (user:password@) is refused without being repeated: the message would carry the password
// into logs, /discovery and admin answers. Engines authenticate with api_key.
func (ck *checker) engineURL(path, raw string) {
	u, err := url.Parse(raw)
	switch {
	case (err == nil && u.User != nil) || (err != nil && strings.Contains(raw, "@")):
		ck.fail(path, "names credentials before its host (user:password@), which the router would never send; "+
			"the URL is not repeated here. Give the engine's key as api_key")
	case err == nil && len(u.Hostname()) > MaxHostLength:
		ck.fail(path, "has a host of %d bytes (%s); a host name has at most %d", len(u.Hostname()), Excerpt(u.Hostname()), MaxHostLength)
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		ck.fail(path, "%s is not an engine base URL; write http://host:port or https://host:port (no path)", Excerpt(raw))
	default:
		if port := u.Port(); port != "" {
			ck.port(path, raw, port, false) // its host is bounded and it has no path: short
		}
	}
}

// excerptLen is how much of a value an error message repeats.
const excerptLen = 96

// Excerpt quotes s for an error message, cut to its first excerptLen bytes (on a rune
// boundary) with the total length said: a hostile value of megabytes costs a log line no more
// than a short one.
func Excerpt(s string) string {
	if len(s) <= excerptLen {
		return strconv.Quote(s)
	}
	cut := excerptLen
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}
