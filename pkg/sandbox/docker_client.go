package sandbox

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// The Engine API versions the backend speaks: the newest both it and the
// engine know, min(engine's ApiVersion, dockerMaxAPI), negotiated once per
// Docker value (see apiVersion) and never below the engine's MinAPIVersion.
// Requests name it as a path prefix (/v1.41/containers/create); the
// endpoints are cited from the reference of each version,
// api/docs/v1.XX.yaml in moby/moby.
//
// The range comes from the Engine API version history
// (api/docs/CHANGELOG.md in moby/moby, formerly
// docs/api/version-history.md; read at commit b985e23, August 2026), read
// for every endpoint and field the backend sends or reads: GET /_ping and
// /version; POST /containers/create with Image, User, Cmd, Entrypoint,
// WorkingDir, Env, Labels, NetworkDisabled and HostConfig's NetworkMode,
// Memory, MemorySwap, PidsLimit, NanoCpus, Ulimits, Init, CgroupnsMode,
// CapDrop, SecurityOpt, ReadonlyRootfs, Tmpfs and Mounts (a volume with
// VolumeOptions NoCopy, Labels and DriverConfig); POST
// /containers/{id}/start; GET /containers/{id}/json (State.Running);
// DELETE /containers/{id} (force, v); POST /containers/{id}/exec
// (AttachStdout, AttachStderr, Tty, Cmd, Env, WorkingDir); POST
// /exec/{id}/start (Detach, Tty; the multiplexed stream); GET
// /exec/{id}/json (Running, ExitCode); PUT /containers/{id}/archive
// (path); POST /images/create (fromImage, tag; the JSON progress stream).
//
//   - Most of these are older than 1.35: PidsLimit came in 1.23; Mounts,
//     Init, NanoCpus, exec's Env, the API-Version header and MinAPIVersion
//     in 1.25; exec's WorkingDir in 1.35. Older engines ignore the fields
//     they do not know.
//   - The floor is 1.41 (Docker 20.10): CgroupnsMode came in 1.41, and an
//     engine that ignores it gives a container on a cgroup v1 host the
//     host's cgroup namespace; and IpcMode, left to the engine, is private
//     from 1.40 only (shareable before). From 1.41 on every engine makes
//     the same container of the same body.
//   - Up to 1.55, the newest version in the history (1.56 has no entries
//     yet), nothing the backend uses changed meaning: 1.42 refuses mount
//     options of another mount type (VolumeOptions go only with a volume
//     mount); 1.44 checks at create what start checked before (and
//     Docker 29 refuses versions below 1.44); 1.48 deprecates the progress
//     stream's "error" field for "errorDetail" (pull reads both); 1.52
//     drops the container-wide MacAddress (not sent). The daemon's
//     version checks in daemon/server/router (container, exec, image,
//     system) agree.
const (
	dockerMinAPI = "1.41"
	dockerMaxAPI = "1.55"
)

// ErrDockerAPIVersion means the Docker engine speaks no Engine API version
// that the backend does; the error names both ranges.
var ErrDockerAPIVersion = errors.New("sandbox: no Docker Engine API version in common with the engine")

// apiError is a non-2xx answer of the engine.
type apiError struct {
	method, path string
	status       int
	message      string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("docker %s %s: %d %s", e.method, e.path, e.status, e.message)
}

func isStatus(err error, status int) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.status == status
}

// versionRefused reports whether the engine refused a request for its
// API version: 400 "client version 1.43 is too new. Maximum supported API
// version is 1.41" or "... is too old. Minimum supported API version is
// 1.44" (daemon/server/middleware/version.go in moby/moby).
func versionRefused(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.status == http.StatusBadRequest &&
		strings.HasPrefix(ae.message, "client version ") &&
		(strings.Contains(ae.message, " is too new") || strings.Contains(ae.message, " is too old"))
}

// apiVersion is a "major.minor" Engine API version.
type apiVersion struct{ major, minor int }

func parseAPIVersion(s string) (apiVersion, error) {
	major, minor, ok := strings.Cut(s, ".")
	a, aerr := strconv.Atoi(major)
	b, berr := strconv.Atoi(minor)
	if !ok || aerr != nil || berr != nil || a < 0 || b < 0 {
		return apiVersion{}, fmt.Errorf("API version %q is not major.minor", s)
	}
	return apiVersion{a, b}, nil
}

func mustAPIVersion(s string) apiVersion {
	v, err := parseAPIVersion(s)
	if err != nil {
		panic(err)
	}
	return v
}

func (v apiVersion) less(w apiVersion) bool {
	return v.major < w.major || v.major == w.major && v.minor < w.minor
}

func (v apiVersion) String() string { return fmt.Sprintf("%d.%d", v.major, v.minor) }

// pickAPIVersion chooses the version to speak with an engine that serves
// engineMin to engineMax (engineMin "" when it does not say): the newest
// that both sides know.
func pickAPIVersion(engineMin, engineMax string) (string, error) {
	lo, hi := mustAPIVersion(dockerMinAPI), mustAPIVersion(dockerMaxAPI)
	v, err := parseAPIVersion(engineMax)
	if err != nil {
		return "", fmt.Errorf("engine's maximum: %w", err)
	}
	var emin apiVersion
	if engineMin != "" {
		if emin, err = parseAPIVersion(engineMin); err != nil {
			return "", fmt.Errorf("engine's minimum: %w", err)
		}
	}
	if hi.less(v) {
		v = hi
	}
	if v.less(lo) || v.less(emin) {
		return "", fmt.Errorf("%w: the engine speaks %s to %s, this backend %s to %s",
			ErrDockerAPIVersion, cmp.Or(engineMin, "?"), engineMax, dockerMinAPI, dockerMaxAPI)
	}
	return v.String(), nil
}

// APIVersion returns the Engine API version the backend speaks with the
// engine, negotiating it first if no request has yet.
func (d *Docker) APIVersion(ctx context.Context) (string, error) {
	return d.apiVersion(ctx)
}

// apiVersion returns the negotiated version. One caller negotiates while
// the others wait (or give up with their ctx); a failed negotiation is not
// kept, so the next request tries again.
func (d *Docker) apiVersion(ctx context.Context) (string, error) {
	if v := d.version.Load(); v != nil {
		return *v, nil
	}
	select {
	case d.negotiating <- struct{}{}:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	defer func() { <-d.negotiating }()
	if v := d.version.Load(); v != nil {
		return *v, nil
	}
	v, err := d.negotiate(ctx)
	if err != nil {
		return "", err
	}
	d.version.Store(&v)
	return v, nil
}

// forget drops the negotiated version v, which the engine refused (an
// engine upgraded or downgraded under a running worker), so that the next
// request negotiates again. A version negotiated since is kept.
func (d *Docker) forget(v string) {
	if cur := d.version.Load(); cur != nil && *cur == v {
		d.version.CompareAndSwap(cur, nil)
	}
}

// negotiate asks the engine for its API versions: GET /version, which an
// engine answers at any version, so unversioned (ApiVersion and
// MinAPIVersion). Where that is refused (a proxy in front of the socket
// may allow only some endpoints), GET /_ping's API-Version header gives
// the engine's newest version alone; an engine that finds the choice too
// old then refuses the first request, naming its minimum.
func (d *Docker) negotiate(ctx context.Context) (string, error) {
	var info struct {
		APIVersion    string `json:"ApiVersion"`
		MinAPIVersion string `json:"MinAPIVersion"`
	}
	err := d.callAt(ctx, "", http.MethodGet, "/version", nil, nil, &info)
	var ae *apiError
	if errors.As(err, &ae) || err == nil && info.APIVersion == "" {
		resp, perr := d.send(ctx, "", http.MethodGet, "/_ping", nil, nil)
		if perr != nil {
			return "", fmt.Errorf("docker API version: %w", errors.Join(err, perr))
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		info.APIVersion, info.MinAPIVersion, err = resp.Header.Get("API-Version"), "", nil
		if info.APIVersion == "" {
			return "", errors.New("docker API version: the engine names none (GET /version, GET /_ping)")
		}
	}
	if err != nil {
		return "", fmt.Errorf("docker API version: %w", err)
	}
	v, err := pickAPIVersion(info.MinAPIVersion, info.APIVersion)
	if err != nil {
		return "", fmt.Errorf("docker API version of %s: %w", d.cfg.Host, err)
	}
	return v, nil
}

// do sends one request at the negotiated API version; body is
// JSON-encoded unless it is an io.Reader. A 2xx response is returned open
// for the caller to read; anything else is an *apiError. A request the
// engine refuses for its version is sent once more at a version
// negotiated anew, unless its body is a stream that cannot be rewound
// (the caller then sees the refusal and may send a new stream).
func (d *Docker) do(ctx context.Context, method, path string, query url.Values, body any) (*http.Response, error) {
	for retried := false; ; retried = true {
		v, err := d.apiVersion(ctx)
		if err != nil {
			return nil, fmt.Errorf("docker %s %s: %w", method, path, err)
		}
		resp, err := d.send(ctx, "/v"+v, method, path, query, body)
		if retried || !versionRefused(err) {
			return resp, err
		}
		d.forget(v)
		if !rewind(body) {
			return nil, err
		}
	}
}

// rewind prepares body to be sent again, if it can be.
func rewind(body any) bool {
	switch b := body.(type) {
	case io.Seeker:
		_, err := b.Seek(0, io.SeekStart)
		return err == nil
	case io.Reader:
		return false
	}
	return true
}

// send sends one request with the path prefix version ("" for none).
func (d *Docker) send(ctx context.Context, version, method, path string, query url.Values, body any) (*http.Response, error) {
	var r io.Reader
	ctype := "application/json"
	up, upgrade := body.(upgradeBody)
	if upgrade {
		body = up.body
	}
	switch b := body.(type) {
	case nil:
	case io.Reader:
		r, ctype = b, "application/x-tar"
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(buf)
	}
	u := d.base + version + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, r)
	if err != nil {
		return nil, err
	}
	if r != nil {
		req.Header.Set("Content-Type", ctype)
	}
	if upgrade {
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "tcp")
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("docker %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 && !(upgrade && resp.StatusCode == http.StatusSwitchingProtocols) {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		var msg struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(b, &msg) != nil || msg.Message == "" {
			msg.Message = strings.TrimSpace(string(b))
		}
		return nil, &apiError{method: method, path: path, status: resp.StatusCode, message: msg.Message}
	}
	return resp, nil
}

// call sends a request and decodes a JSON answer into out (nil: discard).
func (d *Docker) call(ctx context.Context, method, path string, query url.Values, body, out any) error {
	resp, err := d.do(ctx, method, path, query, body)
	return decodeAnswer(resp, err, method, path, out)
}

// callAt is call with the path prefix version, without negotiation.
func (d *Docker) callAt(ctx context.Context, version, method, path string, query url.Values, body, out any) error {
	resp, err := d.send(ctx, version, method, path, query, body)
	return decodeAnswer(resp, err, method, path, out)
}

func decodeAnswer(resp *http.Response, err error, method, path string, out any) error {
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("docker %s %s: decode: %w", method, path, err)
	}
	return nil
}

// readProgress reads the JSON progress stream of POST /images/create to
// its end; the message that reports a failure has "errorDetail" (and, up
// to API 1.47 at least, "error").
func readProgress(r io.Reader) error {
	dec := json.NewDecoder(r)
	for {
		var msg struct {
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if e := cmp.Or(msg.ErrorDetail.Message, msg.Error); e != "" {
			return errors.New(e)
		}
	}
}

// Ping checks that the engine answers and speaks an API version the
// backend does (negotiating it), then GET /_ping at that version.
func (d *Docker) Ping(ctx context.Context) error {
	return d.call(ctx, http.MethodGet, "/_ping", nil, nil, nil)
}

// Close closes the backend's idle connections to the engine. Sandboxes
// are not touched, and the backend stays usable: a later request opens a
// new connection.
func (d *Docker) Close() error {
	d.client.CloseIdleConnections()
	return nil
}

// upgradeBody is a JSON body whose request asks to hijack the connection
// ("Connection: Upgrade", "Upgrade: tcp"), which the engine answers 101.
type upgradeBody struct{ body any }

// upgrade sends a POST whose answer hijacks the connection (an exec's
// start with its stdin attached) and returns the connection: the
// multiplexed output to read, the stdin to write. ctx bounds the request
// only: the connection lives until it is closed.
func (d *Docker) upgrade(ctx context.Context, path string, body any) (io.ReadWriteCloser, error) {
	resp, err := d.do(ctx, http.MethodPost, path, nil, upgradeBody{body})
	if err != nil {
		return nil, err
	}
	rw, ok := resp.Body.(io.ReadWriteCloser)
	if resp.StatusCode != http.StatusSwitchingProtocols || !ok {
		resp.Body.Close()
		return nil, fmt.Errorf("docker POST %s: answered %d, not an upgraded connection", path, resp.StatusCode)
	}
	return rw, nil
}
