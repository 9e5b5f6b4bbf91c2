package admin

import (
	"crypto/subtle"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// guard decides who may use the admin routes (all but /healthz and /readyz).
//
// With server.admin_token set, every route needs `Authorization: Bearer <token>` (the scheme in
// any case, as RFC 9110 says). A browser never sends that header on its own, so a page the
// operator visits cannot forge an admin request.
//
// Without a token the listener is open, which is safe only on loopback, and a browser is the
// danger: a page on any site can make the operator's browser POST to 127.0.0.1 (CSRF), and a
// hostile DNS name that re-resolves to 127.0.0.1 lets a page read the answers too (DNS
// rebinding). So a tokenless request from a loopback peer must name the admin listener in its
// Host (an IP address or "localhost" with the listener's port: a rebinding page's Host is its
// own DNS name), and a mutation (POST) is accepted only from loopback and only as a request a
// browser cannot send across sites without asking first: with a JSON Content-Type or an
// X-Narwhal-Admin header (either makes a cross-site fetch preflighted, and this listener
// answers no preflight). curl, scripts and `narwhal` itself send one of them. A request that
// starts work running on after it (a CPU profile, a trace, a delta profile: costly) is held to
// the same rules as a change, since an <img> tag on any page could otherwise start one.
type guard struct {
	want []byte // "Bearer <token>"; nil: no token
	port string // the admin listener's port, for the Host check
}

// AdminHeader is the header a tokenless mutation may carry to show it is not a browser's
// simple cross-site request (a JSON Content-Type does as well).
const AdminHeader = "X-Narwhal-Admin"

func (g guard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.want != nil {
			if !bearerMatches(r.Header.Get("Authorization"), g.want) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="narwhal-admin"`)
				http.Error(w, "missing or wrong bearer token (send Authorization: Bearer <server.admin_token>; narwhal dump takes --token or $NARWHAL_ADMIN_TOKEN)", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		local := loopbackPeer(r.RemoteAddr)
		if local && !g.namesListener(r.Host) {
			http.Error(w, "the Host header does not name this admin listener (use 127.0.0.1:"+g.port+" or localhost:"+g.port+"; set server.admin_token to reach it by another name)", http.StatusMisdirectedRequest)
			return
		}
		if (r.Method != http.MethodGet && r.Method != http.MethodHead) || costly(r) {
			switch {
			case !local:
				http.Error(w, "admin changes and profiles without server.admin_token are accepted from this host only; set server.admin_token", http.StatusForbidden)
				return
			case !nonSimple(r):
				http.Error(w, "a change or a profile without server.admin_token needs Content-Type: application/json or an "+AdminHeader+
					" header (a browser cannot send either across sites without asking): curl -H '"+AdminHeader+": 1'", http.StatusForbidden)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// bearerMatches compares an Authorization value with "Bearer <token>" in constant time for the
// credentials, the scheme without regard to case.
func bearerMatches(h string, want []byte) bool {
	const scheme = len("Bearer ")
	if len(h) < scheme || !strings.EqualFold(h[:scheme], "Bearer ") {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(h[scheme:])), want[scheme:]) == 1
}

func loopbackPeer(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// namesListener reports whether a Host header names this listener: an IP address or
// "localhost", with the listener's port.
func (g guard) namesListener(host string) bool {
	h, port, err := net.SplitHostPort(host)
	if err != nil || port != g.port {
		return false
	}
	return strings.EqualFold(h, "localhost") || net.ParseIP(h) != nil
}

// nonSimple reports whether a browser would have had to ask (a CORS preflight) before sending r
// across sites: a JSON body or the admin header.
func nonSimple(r *http.Request) bool {
	if r.Header.Get(AdminHeader) != "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "application/json"
}

// portOf is the port of a listener address ("" when it has none).
func portOf(addr string) string {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	if _, err := strconv.Atoi(p); err != nil {
		return ""
	}
	return p
}
