package service

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/actloop/actloop/pkg/schema"
)

// ErrUnauthenticated is the error of a service that would start without
// authentication and was not told it may (ACTLOOP_INSECURE).
var ErrUnauthenticated = errors.New("refusing to start unauthenticated")

// InsecureWarning is what a service started with ACTLOOP_INSECURE=true logs,
// as an error, at every start.
const InsecureWarning = "ACTLOOP_INSECURE=true: RUNNING WITHOUT AUTHENTICATION; anyone who reaches NATS, Redis or the HTTP API can read and change the work"

// Unauthenticated names, one entry per server, the settings that would
// authenticate c's connections and are all unset: NATS (user and
// password, token, nkey, creds file, a client certificate or credentials in
// the URL) and Redis (a password, in ACTLOOP_REDIS_PASSWORD or the URL).
// Empty means every connection authenticates.
func (c *Common) Unauthenticated() []string {
	missing := c.NATSUnauthenticated()
	if opts, err := c.RedisOptions(); err == nil && opts.Password == "" {
		missing = append(missing, "Redis has no password: set ACTLOOP_REDIS_PASSWORD (or a password in ACTLOOP_REDIS_URL)")
	}
	return missing
}

// NATSUnauthenticated is Unauthenticated for a client of NATS alone (the
// gateway): NATS without credentials.
func (c *Common) NATSUnauthenticated() []string {
	var missing []string
	natsCreds := c.NATSUser != "" || c.NATSPassword != "" || c.NATSToken != "" || c.NATSCreds != "" ||
		c.NATSNKey != "" || c.NATSTLSCert != ""
	if !natsCreds {
		if has, err := natsURLHasUser(c.NATSURL); err == nil && has {
			natsCreds = true
		}
	}
	if !natsCreds {
		missing = append(missing, "NATS has no credentials: set ACTLOOP_NATS_USER and ACTLOOP_NATS_PASSWORD "+
			"(or ACTLOOP_NATS_TOKEN, ACTLOOP_NATS_NKEY, ACTLOOP_NATS_CREDS, ACTLOOP_NATS_TLS_CERT, or credentials in ACTLOOP_NATS_URL)")
	}
	return missing
}

// RequireAuth is nil when nothing is missing (see Unauthenticated) or
// insecure allows it, and otherwise an ErrUnauthenticated naming each
// missing setting and ACTLOOP_INSECURE.
func RequireAuth(insecure bool, missing []string) error {
	if len(missing) == 0 || insecure {
		return nil
	}
	return fmt.Errorf("%w: %s; or set ACTLOOP_INSECURE=true to run without authentication", ErrUnauthenticated,
		strings.Join(missing, "; "))
}

// Bearer lets through requests with "Authorization: Bearer <token>"; the
// others get 401 with a JSON error naming ACTLOOP_API_TOKEN. An empty token
// lets every request through: a service started with ACTLOOP_INSECURE=true
// (Main refuses an empty token otherwise), or one built in code without a
// token.
func Bearer(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="actloop"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(schema.APIError{
				Error: "unauthorized: this call needs Authorization: Bearer <ACTLOOP_API_TOKEN>"})
			return
		}
		h.ServeHTTP(w, r)
	})
}
