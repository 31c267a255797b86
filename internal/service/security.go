package service

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
)

// Security holds the credentials and TLS settings of the NATS and Redis
// connections (part of Common, so every service and the CLI read them).
// Secrets given here never appear in logs or errors; neither do the ones
// in ACTLOOP_NATS_URL or ACTLOOP_REDIS_URL (RedactURL).
type Security struct {
	// NATS authentication: at most one of user and password, token, nkey
	// seed file, credentials file, or user info in ACTLOOP_NATS_URL.

	// NATSUser is the NATS user; it needs ACTLOOP_NATS_PASSWORD.
	NATSUser string `envconfig:"NATS_USER"`
	// NATSPassword is that user's password.
	NATSPassword string `envconfig:"NATS_PASSWORD"`
	// NATSToken is a NATS authentication token.
	NATSToken string `envconfig:"NATS_TOKEN"`
	// NATSCreds is a .creds file (user JWT and nkey seed) for a server in
	// operator (JWT) mode.
	NATSCreds string `envconfig:"NATS_CREDS"`
	// NATSNKey is a file holding an nkey user seed (SU…).
	NATSNKey string `envconfig:"NATS_NKEY"`

	// NATS TLS: any of these turns TLS on (as a tls:// URL does).

	// NATSTLSCA is a PEM file of the authorities the NATS server's
	// certificate must chain to; unset, the system's.
	NATSTLSCA string `envconfig:"NATS_TLS_CA"`
	// NATSTLSCert is a client certificate (PEM), for a server that verifies
	// clients; it needs ACTLOOP_NATS_TLS_KEY.
	NATSTLSCert string `envconfig:"NATS_TLS_CERT"`
	// NATSTLSKey is the client certificate's private key (PEM).
	NATSTLSKey string `envconfig:"NATS_TLS_KEY"`

	// Redis ACL user and password; each, when set, wins over the URL's.

	// RedisUsername is the Redis ACL user; it needs a password.
	RedisUsername string `envconfig:"REDIS_USERNAME"`
	// RedisPassword is the Redis password: the ACL user's, or without a
	// user the one of requirepass.
	RedisPassword string `envconfig:"REDIS_PASSWORD"`

	// Redis TLS: any of these turns TLS on (as a rediss:// URL does).

	// RedisTLSCA is a PEM file of the authorities the Redis server's
	// certificate must chain to; unset, the system's. The certificate must
	// name the URL's host.
	RedisTLSCA string `envconfig:"REDIS_TLS_CA"`
	// RedisTLSCert is a client certificate (PEM), for a server that
	// verifies clients (tls-auth-clients); it needs ACTLOOP_REDIS_TLS_KEY.
	RedisTLSCert string `envconfig:"REDIS_TLS_CERT"`
	// RedisTLSKey is the client certificate's private key (PEM).
	RedisTLSKey string `envconfig:"REDIS_TLS_KEY"`
}

// validateSecurity joins every problem with c's credentials and TLS
// settings: combinations, and files that cannot be read or parsed.
func (c *Common) validateSecurity() error {
	_, nerr := c.NATSOptions()
	_, rerr := c.RedisOptions()
	return errors.Join(nerr, rerr)
}

// RedisClusterReload is how often a cluster client reads the slot map
// again: a failover is followed within about this long.
const RedisClusterReload = 2 * time.Second

// NewRedis returns a client of c's Redis (not yet connected): one server,
// or with RedisCluster a cluster client seeded with the URL's nodes, with
// the same credentials and TLS settings.
func (c *Common) NewRedis() (redis.UniversalClient, error) {
	opts, err := c.RedisOptions()
	if err != nil {
		return nil, err
	}
	if !c.RedisCluster {
		return redis.NewClient(opts), nil
	}
	co, err := redis.ParseClusterURL(c.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("ACTLOOP_REDIS_URL: %w", redactURLError(err))
	}
	co.Username, co.Password, co.TLSConfig = opts.Username, opts.Password, opts.TLSConfig
	// A master that died answers nothing, so no MOVED tells the client of
	// its replica's promotion: read the slot map often (CLUSTER SLOTS, one
	// small reply) rather than go-redis's default of every minute.
	co.ClusterStateReloadInterval = RedisClusterReload
	return redis.NewClusterClient(co), nil
}

// NATSOptions returns the nats.Connect options for c's NATS credentials
// and TLS settings (none when none is set), after checking them: at most
// one way to authenticate, a password with its user, a certificate with
// its key, and every file readable and parseable. Each error names its
// ACTLOOP_ variable and holds no secret.
func (c *Common) NATSOptions() ([]nats.Option, error) {
	var errs []error
	var methods []string
	if c.NATSUser != "" || c.NATSPassword != "" {
		methods = append(methods, "ACTLOOP_NATS_USER/ACTLOOP_NATS_PASSWORD")
		if c.NATSUser == "" {
			errs = append(errs, errors.New("ACTLOOP_NATS_PASSWORD: set without ACTLOOP_NATS_USER"))
		}
		if c.NATSPassword == "" {
			errs = append(errs, errors.New("ACTLOOP_NATS_USER: set without ACTLOOP_NATS_PASSWORD"))
		}
	}
	if c.NATSToken != "" {
		methods = append(methods, "ACTLOOP_NATS_TOKEN")
	}
	if c.NATSCreds != "" {
		methods = append(methods, "ACTLOOP_NATS_CREDS")
	}
	if c.NATSNKey != "" {
		methods = append(methods, "ACTLOOP_NATS_NKEY")
	}
	if hasUser, err := natsURLHasUser(c.NATSURL); err != nil {
		errs = append(errs, err)
	} else if hasUser {
		methods = append(methods, "ACTLOOP_NATS_URL (user info)")
	}
	if len(methods) > 1 {
		errs = append(errs, fmt.Errorf("%s: set at most one NATS authentication (user and password, token, nkey, creds file, or credentials in ACTLOOP_NATS_URL)",
			strings.Join(methods, ", ")))
	}

	var opts []nats.Option
	switch {
	case len(methods) > 1:
	case c.NATSUser != "" && c.NATSPassword != "":
		opts = append(opts, nats.UserInfo(c.NATSUser, c.NATSPassword))
	case c.NATSToken != "":
		opts = append(opts, nats.Token(c.NATSToken))
	case c.NATSCreds != "":
		if err := checkCreds(c.NATSCreds); err != nil {
			errs = append(errs, err)
		} else {
			opts = append(opts, nats.UserCredentials(c.NATSCreds))
		}
	case c.NATSNKey != "":
		if err := readable("ACTLOOP_NATS_NKEY", c.NATSNKey); err != nil {
			errs = append(errs, err)
		} else if o, err := nats.NkeyOptionFromSeed(c.NATSNKey); err != nil {
			errs = append(errs, fmt.Errorf("ACTLOOP_NATS_NKEY: %s: not an nkey user seed: %w", c.NATSNKey, err))
		} else {
			opts = append(opts, o)
		}
	}

	if c.NATSTLSCA != "" {
		if _, err := loadCA("ACTLOOP_NATS_TLS_CA", c.NATSTLSCA); err != nil {
			errs = append(errs, err)
		} else {
			opts = append(opts, nats.RootCAs(c.NATSTLSCA))
		}
	}
	if ok, err := checkKeyPair("ACTLOOP_NATS_TLS", c.NATSTLSCert, c.NATSTLSKey); err != nil {
		errs = append(errs, err)
	} else if ok {
		opts = append(opts, nats.ClientCert(c.NATSTLSCert, c.NATSTLSKey))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return opts, nil
}

// ConnectNATS connects to c.NATSURL as "actloop-<name>" with c's
// credentials and TLS, plus extra options. Its error shows the URL without
// user info.
func (c *Common) ConnectNATS(name string, extra ...nats.Option) (*nats.Conn, error) {
	opts, err := c.NATSOptions()
	if err != nil {
		return nil, err
	}
	opts = append(append([]nats.Option{nats.Name("actloop-" + name)}, opts...), extra...)
	nc, err := nats.Connect(c.NATSURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect nats %s (ACTLOOP_NATS_URL): %w", RedactURL(c.NATSURL), redactURLError(err))
	}
	return nc, nil
}

// RedisOptions returns the go-redis options of c.RedisURL with c's Redis
// username, password (each wins over the URL's) and TLS settings applied.
// TLS is on with a rediss:// URL or any ACTLOOP_REDIS_TLS_ setting; the
// server's name is checked against the URL's host. Each error names its
// ACTLOOP_ variable and holds no secret.
func (c *Common) RedisOptions() (*redis.Options, error) {
	u := c.RedisURL
	if c.RedisCluster {
		// The seed nodes are ParseClusterURL's to read; the credentials and
		// TLS of the first are every node's.
		u = withoutSeeds(u)
	}
	opts, err := redis.ParseURL(u)
	if err != nil {
		return nil, fmt.Errorf("ACTLOOP_REDIS_URL: %w", redactURLError(err))
	}
	var errs []error
	if c.RedisUsername != "" {
		opts.Username = c.RedisUsername
	}
	if c.RedisPassword != "" {
		opts.Password = c.RedisPassword
	}
	if opts.Username != "" && opts.Password == "" {
		errs = append(errs, errors.New("ACTLOOP_REDIS_USERNAME: a user needs a password (ACTLOOP_REDIS_PASSWORD or in ACTLOOP_REDIS_URL)"))
	}
	tlsOn := c.RedisTLSCA != "" || c.RedisTLSCert != "" || c.RedisTLSKey != ""
	if tlsOn && opts.Network == "unix" {
		errs = append(errs, errors.New("ACTLOOP_REDIS_TLS_CA, ACTLOOP_REDIS_TLS_CERT, ACTLOOP_REDIS_TLS_KEY: TLS needs a redis:// or rediss:// URL, not unix://"))
		tlsOn = false
	}
	if tlsOn {
		if opts.TLSConfig == nil {
			host, _, err := net.SplitHostPort(opts.Addr)
			if err != nil {
				host = opts.Addr
			}
			opts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
		}
		if c.RedisTLSCA != "" {
			pool, err := loadCA("ACTLOOP_REDIS_TLS_CA", c.RedisTLSCA)
			if err != nil {
				errs = append(errs, err)
			}
			opts.TLSConfig.RootCAs = pool
		}
		if ok, err := checkKeyPair("ACTLOOP_REDIS_TLS", c.RedisTLSCert, c.RedisTLSKey); err != nil {
			errs = append(errs, err)
		} else if ok {
			// Read at every handshake, so a renewed certificate is used
			// without a restart (as the NATS connection does).
			certFile, keyFile := c.RedisTLSCert, c.RedisTLSKey
			opts.TLSConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				cert, err := tls.LoadX509KeyPair(certFile, keyFile)
				if err != nil {
					return nil, fmt.Errorf("redis client certificate: %w", err)
				}
				return &cert, nil
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return opts, nil
}

// withoutSeeds is a cluster URL without its addr parameters (the other seed
// nodes), as one server's URL.
func withoutSeeds(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u // ParseURL says what is wrong with it
	}
	q := p.Query()
	q.Del("addr")
	p.RawQuery = q.Encode()
	return p.String()
}

// RedactURL returns u, a URL or a comma-separated list of them, with the
// user info (user and password, or token) of each left out: what may be
// logged of a NATS or Redis URL.
func RedactURL(u string) string {
	parts := strings.Split(u, ",")
	for i, p := range parts {
		rest, scheme := p, ""
		if j := strings.Index(p, "://"); j >= 0 {
			scheme, rest = p[:j+3], p[j+3:]
		}
		host := rest
		if j := strings.IndexAny(rest, "/?#"); j >= 0 {
			host = rest[:j]
		}
		if at := strings.LastIndex(host, "@"); at >= 0 {
			rest = rest[at+1:]
		}
		parts[i] = scheme + rest
	}
	return strings.Join(parts, ",")
}

// redactURLError replaces a *url.Error's URL, which may hold a password,
// with its redacted form.
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s %q: %w", ue.Op, RedactURL(ue.URL), ue.Err)
	}
	return err
}

// natsURLHasUser reports whether any URL of the comma-separated list s
// carries user info, which nats.go prefers to every other credential, or
// the URL that does not parse.
func natsURLHasUser(s string) (bool, error) {
	has := false
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if !strings.Contains(p, "://") {
			p = "nats://" + p // as nats.go reads it
		}
		u, err := url.Parse(p)
		if err != nil {
			return false, fmt.Errorf("ACTLOOP_NATS_URL: %w", redactURLError(err))
		}
		has = has || u.User != nil
	}
	return has, nil
}

// readable checks that the file path of the setting name can be read.
func readable(name, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	} else if st.IsDir() {
		return fmt.Errorf("%s: %s is a directory", name, path)
	}
	if _, err := f.Read(make([]byte, 1)); err != nil {
		return fmt.Errorf("%s: read %s: %w", name, path, err)
	}
	return nil
}

// loadCA reads the PEM certificates in path (the setting name) into a pool.
func loadCA(name, path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: %s holds no PEM certificate", name, path)
	}
	return pool, nil
}

// checkKeyPair checks the client certificate and key settings <prefix>_CERT
// and <prefix>_KEY: both or neither, and a matching PEM pair. It reports
// whether they are set.
func checkKeyPair(prefix, cert, key string) (bool, error) {
	switch {
	case cert == "" && key == "":
		return false, nil
	case key == "":
		return false, fmt.Errorf("%s_CERT: set without %s_KEY", prefix, prefix)
	case cert == "":
		return false, fmt.Errorf("%s_KEY: set without %s_CERT", prefix, prefix)
	}
	errs := []error{readable(prefix+"_CERT", cert), readable(prefix+"_KEY", key)}
	if err := errors.Join(errs...); err != nil {
		return false, err
	}
	if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
		return false, fmt.Errorf("%s_CERT, %s_KEY: %s and %s: %w", prefix, prefix, cert, key, err)
	}
	return true, nil
}

// checkCreds checks that the ACTLOOP_NATS_CREDS file holds a user JWT and
// an nkey user seed, as nats.UserCredentials reads it at each connect.
func checkCreds(path string) error {
	if err := readable("ACTLOOP_NATS_CREDS", path); err != nil {
		return err
	}
	var o nats.Options
	if err := nats.UserCredentials(path)(&o); err != nil {
		return fmt.Errorf("ACTLOOP_NATS_CREDS: %s: %w", path, err)
	}
	jwt, err := o.UserJWT()
	if err != nil {
		return fmt.Errorf("ACTLOOP_NATS_CREDS: %s: %w", path, err)
	}
	if strings.Count(jwt, ".") != 2 {
		return fmt.Errorf("ACTLOOP_NATS_CREDS: %s: no user JWT", path)
	}
	if _, err := o.SignatureCB([]byte("actloop")); err != nil {
		return fmt.Errorf("ACTLOOP_NATS_CREDS: %s: no nkey user seed: %w", path, err)
	}
	return nil
}
