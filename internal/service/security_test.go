package service_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/redis/go-redis/v9"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/service/servicetest"
	"github.com/actloop/actloop/pkg/schema"
)

const (
	natsUser     = "actloop"
	natsPassword = "nats-pass-7f3a"
	natsToken    = "nats-token-91c2"
	redisUser    = "actloop"
	redisPass    = "redis-pass-5d8e"
)

// secrets are every credential the tests use: none may appear in an error.
var secrets = []string{natsPassword, natsToken, redisPass, "wrong-pass-0b1d"}

func noSecrets(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range secrets {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error shows a secret: %v", err)
		}
	}
}

// writeFile writes b to a new file under dir and returns its path.
func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// nkeyUser makes an nkey user and writes its seed to a file.
func nkeyUser(t *testing.T, dir, name string) (pub, seedFile string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, err = kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	return pub, writeFile(t, dir, name, seed)
}

// common is Common with every default and the given NATS URL.
func common(url string) service.Common {
	c := service.CommonDefaults()
	c.NATSURL = url
	return c
}

// jetStreamAnswers checks that JetStream answers on nc, as the account's
// user sees it.
func jetStreamAnswers(t *testing.T, nc *nats.Conn) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		t.Fatalf("jetstream account info: %v", err)
	}
}

// A NATS server with TLS (client certificates required), users with
// passwords and an nkey user: the right settings connect and JetStream
// answers; a wrong password, a missing or wrong CA, a missing client
// certificate or an unknown nkey are refused.
func TestNATSTLSAndAuth(t *testing.T) {
	pki := servicetest.NewPKI(t, "nats")
	other := servicetest.NewPKI(t, "other")
	dir := t.TempDir()
	nkeyPub, nkeySeed := nkeyUser(t, dir, "user.nk")
	_, strangerSeed := nkeyUser(t, dir, "stranger.nk")
	srv := servicetest.StartNATS(t, server.Options{
		TLSConfig: pki.ServerTLS(true),
		Users:     []*server.User{{Username: natsUser, Password: natsPassword}},
		Nkeys:     []*server.NkeyUser{{Nkey: nkeyPub}},
	})
	addr := servicetest.Addr(srv)
	secure := func(url string) service.Common {
		c := common(url)
		c.NATSTLSCA, c.NATSTLSCert, c.NATSTLSKey = pki.CA, pki.ClientCert, pki.ClientKey
		return c
	}

	ok := map[string]service.Common{}
	c := secure("nats://" + addr)
	c.NATSUser, c.NATSPassword = natsUser, natsPassword
	ok["user and password settings"] = c
	c = secure("tls://" + addr)
	c.NATSUser, c.NATSPassword = natsUser, natsPassword
	ok["tls:// URL"] = c
	ok["password in the URL"] = secure("nats://" + natsUser + ":" + natsPassword + "@" + addr)
	c = secure("nats://" + addr)
	c.NATSNKey = nkeySeed
	ok["nkey seed file"] = c
	for name, c := range ok {
		t.Run("ok/"+name, func(t *testing.T) {
			if err := c.Validate(); err != nil {
				t.Fatalf("validate: %v", err)
			}
			nc, err := c.ConnectNATS("test")
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			defer nc.Close()
			if _, err := nc.TLSConnectionState(); err != nil {
				t.Fatalf("not TLS: %v", err)
			}
			jetStreamAnswers(t, nc)
		})
	}

	bad := map[string]struct {
		c    service.Common
		want string
	}{}
	c = secure("nats://" + addr)
	c.NATSUser, c.NATSPassword = natsUser, "wrong-pass-0b1d"
	bad["wrong password"] = struct {
		c    service.Common
		want string
	}{c, "authorization violation"}
	c = secure("nats://" + addr)
	bad["no credentials"] = struct {
		c    service.Common
		want string
	}{c, "authorization violation"}
	c = secure("nats://" + addr)
	c.NATSNKey = strangerSeed
	bad["unknown nkey"] = struct {
		c    service.Common
		want string
	}{c, "authorization violation"}
	c = secure("nats://" + addr)
	c.NATSUser, c.NATSPassword, c.NATSTLSCA = natsUser, natsPassword, ""
	bad["no CA"] = struct {
		c    service.Common
		want string
	}{c, "certificate signed by unknown authority"}
	c = secure("nats://" + addr)
	c.NATSUser, c.NATSPassword, c.NATSTLSCA = natsUser, natsPassword, other.CA
	bad["another CA"] = struct {
		c    service.Common
		want string
	}{c, "certificate signed by unknown authority"}
	c = secure("nats://" + addr)
	c.NATSUser, c.NATSPassword, c.NATSTLSCert, c.NATSTLSKey = natsUser, natsPassword, "", ""
	bad["no client certificate"] = struct {
		c    service.Common
		want string
	}{c, ""} // the server ends the handshake; how the client words it varies
	c = secure("nats://" + addr)
	c.NATSUser, c.NATSPassword, c.NATSTLSCert, c.NATSTLSKey = natsUser, natsPassword, other.ClientCert, other.ClientKey
	bad["client certificate of another CA"] = struct {
		c    service.Common
		want string
	}{c, ""}
	for name, b := range bad {
		t.Run("refused/"+name, func(t *testing.T) {
			nc, err := b.c.ConnectNATS("test", nats.MaxReconnects(0), nats.Timeout(5*time.Second))
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if !strings.Contains(strings.ToLower(err.Error()), b.want) {
				t.Fatalf("error %q, want %q", err, b.want)
			}
			if !strings.Contains(err.Error(), "connect nats nats://"+addr) {
				t.Errorf("error %q does not name the URL", err)
			}
			noSecrets(t, err)
		})
	}
}

// A token server: ACTLOOP_NATS_TOKEN connects, a wrong one does not, and
// the error shows neither.
func TestNATSToken(t *testing.T) {
	srv := servicetest.StartNATS(t, server.Options{Authorization: natsToken})
	c := common("nats://" + servicetest.Addr(srv))
	c.NATSToken = natsToken
	nc, err := c.ConnectNATS("test")
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	jetStreamAnswers(t, nc)
	nc.Close()

	c.NATSToken = "wrong-pass-0b1d"
	if nc, err := c.ConnectNATS("test", nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("connected with a wrong token")
	} else {
		noSecrets(t, err)
	}
	// A token in the URL works and is not shown either.
	c.NATSToken = ""
	c.NATSURL = "nats://" + natsToken + "@" + servicetest.Addr(srv)
	if nc, err := c.ConnectNATS("test"); err != nil {
		t.Fatalf("token in the URL: %v", err)
	} else {
		nc.Close()
	}
}

// An operator-mode server (decentralised JWT auth): a .creds file of a
// user the account signed connects, with JetStream.
func TestNATSCredsFile(t *testing.T) {
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	okp, err := nkeys.CreateOperator()
	must(err)
	opub, err := okp.PublicKey()
	must(err)
	oc := jwt.NewOperatorClaims(opub)
	akp, err := nkeys.CreateAccount()
	must(err)
	apub, err := akp.PublicKey()
	must(err)
	ac := jwt.NewAccountClaims(apub)
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	ajwt, err := ac.Encode(okp)
	must(err)
	resolver := &server.MemAccResolver{}
	must(resolver.Store(apub, ajwt))
	// JetStream in operator mode needs a system account.
	skp, err := nkeys.CreateAccount()
	must(err)
	spub, err := skp.PublicKey()
	must(err)
	sjwt, err := jwt.NewAccountClaims(spub).Encode(okp)
	must(err)
	must(resolver.Store(spub, sjwt))

	creds := func(name string, signer nkeys.KeyPair) string {
		ukp, err := nkeys.CreateUser()
		must(err)
		upub, err := ukp.PublicKey()
		must(err)
		ujwt, err := jwt.NewUserClaims(upub).Encode(signer)
		must(err)
		seed, err := ukp.Seed()
		must(err)
		b, err := jwt.FormatUserConfig(ujwt, seed)
		must(err)
		return writeFile(t, t.TempDir(), name, b)
	}
	srv := servicetest.StartNATS(t, server.Options{TrustedOperators: []*jwt.OperatorClaims{oc}, AccountResolver: resolver,
		SystemAccount: spub})

	c := common("nats://" + servicetest.Addr(srv))
	c.NATSCreds = creds("user.creds", akp)
	if err := c.Validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	nc, err := c.ConnectNATS("test")
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	jetStreamAnswers(t, nc)
	nc.Close()

	// A user signed by an account the operator does not know.
	stranger, err := nkeys.CreateAccount()
	must(err)
	c.NATSCreds = creds("stranger.creds", stranger)
	if nc, err := c.ConnectNATS("test", nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("a user of an unknown account connected")
	}
}

// startRedis runs an in-process Redis requiring user and password and,
// with tls, TLS with a client certificate.
func startRedis(t *testing.T, pki *servicetest.PKI) *miniredis.Miniredis {
	t.Helper()
	m := miniredis.NewMiniRedis()
	m.RequireUserAuth(redisUser, redisPass)
	var err error
	if pki != nil {
		err = m.StartTLS(pki.ServerTLS(true))
	} else {
		err = m.Start()
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func pingRedis(c service.Common) error {
	opts, err := c.RedisOptions()
	if err != nil {
		return err
	}
	opts.MaxRetries = -1
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return rdb.Ping(ctx).Err()
}

// Redis with an ACL user and TLS (client certificates required): the
// settings, or the URL, connect; the settings win over the URL's
// credentials; a wrong password and a missing CA are refused.
func TestRedisAuthAndTLS(t *testing.T) {
	pki := servicetest.NewPKI(t, "redis")
	other := servicetest.NewPKI(t, "other")
	m := startRedis(t, pki)
	secure := func(url string) service.Common {
		c := service.CommonDefaults()
		c.RedisURL = url
		c.RedisTLSCA, c.RedisTLSCert, c.RedisTLSKey = pki.CA, pki.ClientCert, pki.ClientKey
		return c
	}
	c := secure("redis://" + m.Addr() + "/0")
	c.RedisUsername, c.RedisPassword = redisUser, redisPass
	ok := map[string]service.Common{"settings": c}
	ok["rediss:// URL with user and password"] = secure("rediss://" + redisUser + ":" + redisPass + "@" + m.Addr() + "/0")
	c = secure("rediss://" + redisUser + ":wrong-pass-0b1d@" + m.Addr() + "/0")
	c.RedisPassword = redisPass
	ok["password setting wins over the URL's"] = c
	for name, c := range ok {
		t.Run("ok/"+name, func(t *testing.T) {
			if err := c.Validate(); err != nil {
				t.Fatalf("validate: %v", err)
			}
			opts, err := c.RedisOptions()
			if err != nil {
				t.Fatal(err)
			}
			if opts.TLSConfig == nil || opts.TLSConfig.ServerName != "127.0.0.1" {
				t.Fatalf("TLS config %+v", opts.TLSConfig)
			}
			if err := pingRedis(c); err != nil {
				t.Fatalf("ping: %v", err)
			}
		})
	}

	type refused struct {
		c    service.Common
		want string
	}
	bad := map[string]refused{}
	c = secure("redis://" + m.Addr() + "/0")
	c.RedisUsername, c.RedisPassword = redisUser, "wrong-pass-0b1d"
	bad["wrong password"] = refused{c, "WRONGPASS"}
	c = secure("redis://" + m.Addr() + "/0")
	bad["no credentials"] = refused{c, "NOAUTH"}
	c = secure("redis://" + m.Addr() + "/0")
	c.RedisUsername, c.RedisPassword, c.RedisTLSCA = redisUser, redisPass, ""
	bad["no CA"] = refused{c, "certificate signed by unknown authority"} // the system's roots
	c = secure("rediss://" + m.Addr() + "/0")
	c.RedisUsername, c.RedisPassword, c.RedisTLSCA = redisUser, redisPass, ""
	bad["rediss:// without the CA"] = refused{c, "certificate signed by unknown authority"}
	c = secure("redis://" + m.Addr() + "/0")
	c.RedisUsername, c.RedisPassword, c.RedisTLSCA = redisUser, redisPass, other.CA
	bad["another CA"] = refused{c, "certificate signed by unknown authority"}
	c = secure("redis://" + m.Addr() + "/0")
	c.RedisUsername, c.RedisPassword, c.RedisTLSCert, c.RedisTLSKey = redisUser, redisPass, "", ""
	bad["no client certificate"] = refused{c, ""}
	for name, b := range bad {
		t.Run("refused/"+name, func(t *testing.T) {
			err := pingRedis(b.c)
			if err == nil {
				t.Fatal("connected")
			}
			if !strings.Contains(err.Error(), b.want) {
				t.Fatalf("error %q, want %q", err, b.want)
			}
			noSecrets(t, err)
		})
	}

	// Without TLS settings a plain server takes the same credentials.
	plain := startRedis(t, nil)
	c = service.CommonDefaults()
	c.RedisURL = "redis://" + plain.Addr() + "/0"
	c.RedisUsername, c.RedisPassword = redisUser, redisPass
	if err := pingRedis(c); err != nil {
		t.Fatalf("plain server: %v", err)
	}
}

// Connect (what every service runs) on a NATS and a Redis that both want
// TLS and credentials: it declares the streams and KV buckets, and the
// dependencies are ready.
func TestConnectSecured(t *testing.T) {
	natsPKI := servicetest.NewPKI(t, "nats")
	redisPKI := servicetest.NewPKI(t, "redis")
	srv := servicetest.StartNATS(t, server.Options{
		TLSConfig: natsPKI.ServerTLS(true),
		Users:     []*server.User{{Username: natsUser, Password: natsPassword}},
	})
	m := startRedis(t, redisPKI)
	c := common("tls://" + servicetest.Addr(srv))
	c.NATSUser, c.NATSPassword = natsUser, natsPassword
	c.NATSTLSCA, c.NATSTLSCert, c.NATSTLSKey = natsPKI.CA, natsPKI.ClientCert, natsPKI.ClientKey
	c.RedisURL = "rediss://" + m.Addr() + "/0"
	c.RedisUsername, c.RedisPassword = redisUser, redisPass
	c.RedisTLSCA, c.RedisTLSCert, c.RedisTLSKey = redisPKI.CA, redisPKI.ClientCert, redisPKI.ClientKey
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := service.Connect(ctx, c, "test", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer d.Close()
	if err := d.Ready(ctx); err != nil {
		t.Fatalf("ready: %v", err)
	}
	if _, err := d.JS.Stream(ctx, schema.StreamSamples); err != nil {
		t.Fatalf("stream %s: %v", schema.StreamSamples, err)
	}
	if _, err := d.JS.KeyValue(ctx, bus.BucketControl); err != nil {
		t.Fatalf("kv %s: %v", bus.BucketControl, err)
	}
	if err := d.Redis.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Get("k"); got != "v" {
		t.Fatalf("redis holds %q", got)
	}

	// A wrong Redis password fails Connect, naming Redis, not the password.
	c.RedisPassword = "wrong-pass-0b1d"
	if d, err := service.Connect(ctx, c, "test", slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil {
		d.Close()
		t.Fatal("connected with a wrong Redis password")
	} else if !strings.Contains(err.Error(), "connect redis rediss://"+m.Addr()) {
		t.Fatalf("error %q", err)
	} else {
		noSecrets(t, err)
	}
}

// Every bad combination of settings and every unusable file is reported
// by Validate, naming the ACTLOOP_ variable, without a secret.
func TestValidateSecurity(t *testing.T) {
	pki := servicetest.NewPKI(t, "a")
	other := servicetest.NewPKI(t, "b")
	dir := t.TempDir()
	_, seed := nkeyUser(t, dir, "user.nk")
	akp, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	aseed, _ := akp.Seed()
	accountSeed := writeFile(t, dir, "account.nk", aseed)
	garbage := writeFile(t, dir, "garbage", []byte("not a key\n"))
	missing := filepath.Join(dir, "missing")
	empty := writeFile(t, dir, "empty", nil)

	for _, tc := range []struct {
		name string
		set  func(c *service.Common)
		want []string
	}{
		{"user without password", func(c *service.Common) { c.NATSUser = "u" },
			[]string{"ACTLOOP_NATS_USER: set without ACTLOOP_NATS_PASSWORD"}},
		{"password without user", func(c *service.Common) { c.NATSPassword = natsPassword },
			[]string{"ACTLOOP_NATS_PASSWORD: set without ACTLOOP_NATS_USER"}},
		{"token and user", func(c *service.Common) { c.NATSUser, c.NATSPassword, c.NATSToken = "u", natsPassword, natsToken },
			[]string{"ACTLOOP_NATS_USER/ACTLOOP_NATS_PASSWORD, ACTLOOP_NATS_TOKEN: set at most one"}},
		{"creds and nkey", func(c *service.Common) { c.NATSCreds, c.NATSNKey = garbage, seed },
			[]string{"ACTLOOP_NATS_CREDS, ACTLOOP_NATS_NKEY: set at most one"}},
		{"token and nkey", func(c *service.Common) { c.NATSToken, c.NATSNKey = natsToken, seed },
			[]string{"ACTLOOP_NATS_TOKEN, ACTLOOP_NATS_NKEY: set at most one"}},
		{"URL credentials and token", func(c *service.Common) {
			c.NATSURL, c.NATSToken = "nats://u:"+natsPassword+"@127.0.0.1:4222", natsToken
		}, []string{"ACTLOOP_NATS_TOKEN, ACTLOOP_NATS_URL (user info): set at most one"}},
		{"URL token and user", func(c *service.Common) {
			c.NATSURL, c.NATSUser, c.NATSPassword = "nats://127.0.0.1:4222, nats://"+natsToken+"@127.0.0.1:4223", "u", natsPassword
		}, []string{"ACTLOOP_NATS_USER/ACTLOOP_NATS_PASSWORD, ACTLOOP_NATS_URL (user info): set at most one"}},
		{"creds missing", func(c *service.Common) { c.NATSCreds = missing },
			[]string{"ACTLOOP_NATS_CREDS: open " + missing + ": no such file"}},
		{"creds not a creds file", func(c *service.Common) { c.NATSCreds = garbage },
			[]string{"ACTLOOP_NATS_CREDS: " + garbage}},
		{"creds a directory", func(c *service.Common) { c.NATSCreds = dir },
			[]string{"ACTLOOP_NATS_CREDS: " + dir + " is a directory"}},
		{"creds empty", func(c *service.Common) { c.NATSCreds = empty },
			[]string{"ACTLOOP_NATS_CREDS: read " + empty}},
		{"nkey missing", func(c *service.Common) { c.NATSNKey = missing },
			[]string{"ACTLOOP_NATS_NKEY: open " + missing}},
		{"nkey not a seed", func(c *service.Common) { c.NATSNKey = garbage },
			[]string{"ACTLOOP_NATS_NKEY: " + garbage + ": not an nkey user seed"}},
		{"nkey of an account", func(c *service.Common) { c.NATSNKey = accountSeed },
			[]string{"ACTLOOP_NATS_NKEY: " + accountSeed + ": not an nkey user seed"}},
		{"NATS CA missing", func(c *service.Common) { c.NATSTLSCA = missing },
			[]string{"ACTLOOP_NATS_TLS_CA: open " + missing}},
		{"NATS CA not PEM", func(c *service.Common) { c.NATSTLSCA = garbage },
			[]string{"ACTLOOP_NATS_TLS_CA: " + garbage + " holds no PEM certificate"}},
		{"NATS cert without key", func(c *service.Common) { c.NATSTLSCert = pki.ClientCert },
			[]string{"ACTLOOP_NATS_TLS_CERT: set without ACTLOOP_NATS_TLS_KEY"}},
		{"NATS key without cert", func(c *service.Common) { c.NATSTLSKey = pki.ClientKey },
			[]string{"ACTLOOP_NATS_TLS_KEY: set without ACTLOOP_NATS_TLS_CERT"}},
		{"NATS cert missing", func(c *service.Common) { c.NATSTLSCert, c.NATSTLSKey = missing, pki.ClientKey },
			[]string{"ACTLOOP_NATS_TLS_CERT: open " + missing}},
		{"NATS key missing", func(c *service.Common) { c.NATSTLSCert, c.NATSTLSKey = pki.ClientCert, missing },
			[]string{"ACTLOOP_NATS_TLS_KEY: open " + missing}},
		{"NATS cert and key do not match", func(c *service.Common) { c.NATSTLSCert, c.NATSTLSKey = pki.ClientCert, other.ClientKey },
			[]string{"ACTLOOP_NATS_TLS_CERT, ACTLOOP_NATS_TLS_KEY: " + pki.ClientCert + " and " + other.ClientKey}},
		{"Redis user without password", func(c *service.Common) { c.RedisUsername = "u" },
			[]string{"ACTLOOP_REDIS_USERNAME: a user needs a password"}},
		{"Redis CA missing", func(c *service.Common) { c.RedisTLSCA = missing },
			[]string{"ACTLOOP_REDIS_TLS_CA: open " + missing}},
		{"Redis CA not PEM", func(c *service.Common) { c.RedisTLSCA = garbage },
			[]string{"ACTLOOP_REDIS_TLS_CA: " + garbage + " holds no PEM certificate"}},
		{"Redis cert without key", func(c *service.Common) { c.RedisTLSCert = pki.ClientCert },
			[]string{"ACTLOOP_REDIS_TLS_CERT: set without ACTLOOP_REDIS_TLS_KEY"}},
		{"Redis key without cert", func(c *service.Common) { c.RedisTLSKey = pki.ClientKey },
			[]string{"ACTLOOP_REDIS_TLS_KEY: set without ACTLOOP_REDIS_TLS_CERT"}},
		{"Redis key a directory", func(c *service.Common) { c.RedisTLSCert, c.RedisTLSKey = pki.ClientCert, dir },
			[]string{"ACTLOOP_REDIS_TLS_KEY: " + dir + " is a directory"}},
		{"Redis cert and key do not match", func(c *service.Common) { c.RedisTLSCert, c.RedisTLSKey = other.ClientCert, pki.ClientKey },
			[]string{"ACTLOOP_REDIS_TLS_CERT, ACTLOOP_REDIS_TLS_KEY: "}},
		{"Redis TLS on a unix socket", func(c *service.Common) { c.RedisURL, c.RedisTLSCA = "unix:///run/redis.sock", pki.CA },
			[]string{"ACTLOOP_REDIS_TLS_CA, ACTLOOP_REDIS_TLS_CERT, ACTLOOP_REDIS_TLS_KEY: TLS needs a redis:// or rediss:// URL"}},
		{"Redis URL that does not parse", func(c *service.Common) { c.RedisURL = "redis://u:" + redisPass + "@[::1/0" },
			[]string{`ACTLOOP_REDIS_URL: parse "redis://[::1/0"`}},
		{"NATS URL that does not parse", func(c *service.Common) { c.NATSURL = "nats://u:" + natsPassword + "@[::1:4222" },
			[]string{`ACTLOOP_NATS_URL: parse "nats://[::1:4222"`}},
		{"NATS and Redis at once", func(c *service.Common) { c.NATSUser, c.RedisTLSCA = "u", missing },
			[]string{"ACTLOOP_NATS_USER: set without", "ACTLOOP_REDIS_TLS_CA: open"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := service.CommonDefaults()
			tc.set(&c)
			err := c.Validate()
			if err == nil {
				t.Fatal("valid")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q, want %q", err, w)
				}
			}
			noSecrets(t, err)
			// What Connect and the CLI build fails the same way.
			_, nerr := c.NATSOptions()
			_, rerr := c.RedisOptions()
			if got := errors.Join(nerr, rerr); got == nil || got.Error() != err.Error() {
				t.Errorf("options: %v, validate: %v", got, err)
			}
		})
	}

	// Every setting right at once is valid; so is none.
	c := service.CommonDefaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if opts, err := c.NATSOptions(); err != nil || len(opts) != 0 {
		t.Fatalf("defaults: %d NATS options, %v", len(opts), err)
	}
	if opts, err := c.RedisOptions(); err != nil || opts.TLSConfig != nil || opts.Password != "" {
		t.Fatalf("defaults: Redis options %+v, %v", opts, err)
	}
	c.NATSNKey, c.NATSTLSCA, c.NATSTLSCert, c.NATSTLSKey = seed, pki.CA, pki.ClientCert, pki.ClientKey
	c.RedisUsername, c.RedisPassword = redisUser, redisPass
	c.RedisTLSCA, c.RedisTLSCert, c.RedisTLSKey = pki.CA, pki.ClientCert, pki.ClientKey
	if err := c.Validate(); err != nil {
		t.Fatalf("all set: %v", err)
	}
}

// Validate on a file the process may not read (not as root: root reads
// anything).
func TestValidateUnreadable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("running as root, which reads any file")
	}
	pki := servicetest.NewPKI(t, "a")
	if err := os.Chmod(pki.CA, 0); err != nil {
		t.Fatal(err)
	}
	c := service.CommonDefaults()
	c.NATSTLSCA, c.RedisTLSCA = pki.CA, pki.CA
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "ACTLOOP_NATS_TLS_CA: open "+pki.CA+": permission denied") ||
		!strings.Contains(err.Error(), "ACTLOOP_REDIS_TLS_CA: open "+pki.CA+": permission denied") {
		t.Fatalf("validate: %v", err)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                           "nats://127.0.0.1:4222",
		"nats://u:p@127.0.0.1:4222":                       "nats://127.0.0.1:4222",
		"tls://token@nats:4222":                           "tls://nats:4222",
		"nats://u:p@ss@h1:1, nats://u:p@h2:2,nats://h3:3": "nats://h1:1, nats://h2:2,nats://h3:3",
		"u:p@h:4222":                                      "h:4222",
		"h:4222":                                          "h:4222",
		"redis://:pw@redis:6379/0":                        "redis://redis:6379/0",
		"rediss://user:pw@redis:6380/1?dial_timeout=3s":   "rediss://redis:6380/1?dial_timeout=3s",
		"redis://redis:6379/0?x=a@b":                      "redis://redis:6379/0?x=a@b",
		"unix:///run/redis.sock":                          "unix:///run/redis.sock",
		"":                                                "",
	} {
		if got := service.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// With ACTLOOP_REDIS_CLUSTER the URL names seed nodes (addr parameters):
// it validates, and NewRedis makes a cluster client of every seed with the
// URL's credentials; without it, such a URL is refused naming the setting.
func TestRedisClusterURL(t *testing.T) {
	c := service.CommonDefaults()
	c.RedisURL = "redis://:pw@h1:6379?addr=h2:6379&addr=h3:6379"
	if _, err := c.NewRedis(); err == nil || !strings.Contains(err.Error(), "ACTLOOP_REDIS_URL") {
		t.Fatalf("a cluster URL without ACTLOOP_REDIS_CLUSTER: %v, want an error naming ACTLOOP_REDIS_URL", err)
	}
	c.RedisCluster = true
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	rdb, err := c.NewRedis()
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("%T, want a cluster client", rdb)
	}
	o := cc.Options()
	if !slices.Equal(o.Addrs, []string{"h1:6379", "h2:6379", "h3:6379"}) || o.Password != "pw" ||
		o.ClusterStateReloadInterval != service.RedisClusterReload {
		t.Fatalf("cluster options: addrs %v, password %q, reload %v", o.Addrs, o.Password, o.ClusterStateReloadInterval)
	}
}
