package schema

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
)

// A result travels in two parts, so that a trajectory of any length fits a
// NATS server's max_payload (1 MiB by default): its head (ResultHead, JSON,
// a few hundred bytes) is the message on actloop.results.<traj_id>, and its body —
// token ids, log-probs, versions, loss mask, messages, diff, tests,
// metadata — is an object in the JetStream Object Store bucket
// BucketResultBodies, named in the head's BodyRef (a claim check). The
// object is stored before its head is published, and kept as long as the
// results stream keeps heads.
//
// The body is gzip-compressed. Inside:
//
//	offset  size  field
//	0       4     magic "ALRB"
//	4       4     format version, uint32 little-endian (BodyFormat)
//	8       4     n, the number of tokens, uint32 LE
//	12      4     m, the length of the JSON part, uint32 LE
//	16      4n    tokens, int32 LE
//	16+4n   4n    logprobs, float32 LE
//	16+8n   4n    versions, int32 LE
//	16+12n  n     loss_mask, int8
//	16+13n  m     JSON object: messages, segments, diff, tests, metadata (as in Result)
//
// Every array starts on a 4-byte boundary, so a reader can view it in
// place (numpy.frombuffer with dtype "<i4", "<f4", "<i4", "i1").

// BucketResultBodies is the Object Store bucket of result bodies.
const BucketResultBodies = "ACTLOOP_RESULT_BODIES"

// BodyFormat is the version of the body layout this package writes.
const BodyFormat = 1

// MaxBodyTokens bounds the tokens a body may hold (16M: far past any
// context window), so a corrupt header cannot make a reader allocate
// without bound.
const MaxBodyTokens = 1 << 24

const bodyMagic = "ALRB"

// BodyRef names a result's body: where it is and what it must be.
type BodyRef struct {
	Bucket string `json:"bucket"`
	Name   string `json:"name"`
	// Size is the stored (compressed) size in bytes; SHA256 the hex
	// SHA-256 of the stored bytes.
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// SHA256Pattern is what BodyRef.SHA256 must match, as a regular expression
// (Go's and the JSON Schema's "pattern"): 64 lowercase hex digits.
const SHA256Pattern = `^[0-9a-f]{64}$`

var hexSHA256 = regexp.MustCompile(SHA256Pattern)

func (b *BodyRef) validate(p *problems) {
	if b == nil {
		p.add("body", "missing")
		return
	}
	if b.Bucket == "" {
		p.add("body.bucket", "missing")
	}
	if b.Name == "" {
		p.add("body.name", "missing")
	}
	if b.Size <= 0 {
		p.add("body.size", "must be > 0, got %d", b.Size)
	}
	if !hexSHA256.MatchString(b.SHA256) {
		p.add("body.sha256", "not 64 lowercase hex digits: %q", clip(b.SHA256))
	}
}

// bodyJSON is the JSON part of a body.
type bodyJSON struct {
	Messages []Message         `json:"messages"`
	Segments []int             `json:"segments,omitempty"`
	Diff     string            `json:"diff,omitempty"`
	Tests    map[string]string `json:"tests,omitempty"`
	Metadata json.RawMessage   `json:"metadata,omitempty"`
}

// EncodeBody encodes r's body (everything a head lacks), compressed.
func EncodeBody(r *Result) ([]byte, error) {
	n := len(r.Tokens)
	if len(r.Logprobs) != n || len(r.Versions) != n || len(r.LossMask) != n {
		return nil, fieldErr("tokens", "tokens, logprobs, loss_mask and versions differ in length (%d, %d, %d, %d)",
			n, len(r.Logprobs), len(r.LossMask), len(r.Versions))
	}
	if n > MaxBodyTokens {
		return nil, fieldErr("tokens", "%d tokens exceeds the limit of %d", n, MaxBodyTokens)
	}
	if err := checkSegments(r.Segments, n); err != nil {
		return nil, err
	}
	j, err := json.Marshal(bodyJSON{Messages: r.Messages, Segments: r.Segments, Diff: r.Diff, Tests: r.Tests, Metadata: r.Metadata})
	if err != nil {
		return nil, fmt.Errorf("body of %s: %w", r.TrajID, err)
	}
	raw := make([]byte, 16+13*n+len(j))
	copy(raw, bodyMagic)
	le := binary.LittleEndian
	le.PutUint32(raw[4:], BodyFormat)
	le.PutUint32(raw[8:], uint32(n))
	le.PutUint32(raw[12:], uint32(len(j)))
	o := 16
	for i := range n {
		le.PutUint32(raw[o+4*i:], uint32(r.Tokens[i]))
		le.PutUint32(raw[o+4*n+4*i:], math.Float32bits(r.Logprobs[i]))
		le.PutUint32(raw[o+8*n+4*i:], uint32(r.Versions[i]))
		raw[o+12*n+i] = byte(r.LossMask[i])
	}
	copy(raw[o+13*n:], j)
	var out bytes.Buffer
	out.Grow(len(raw) / 2)
	zw, _ := gzip.NewWriterLevel(&out, gzip.BestSpeed)
	if _, err := zw.Write(raw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// DecodeBody decodes a body encoded by EncodeBody into r's body fields.
// Every error wraps ErrInvalid.
func DecodeBody(b []byte, r *Result) error {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return fieldErr("body", "not gzip: %v", err)
	}
	var h [16]byte
	if _, err := io.ReadFull(zr, h[:]); err != nil {
		return fieldErr("body", "header: %v", err)
	}
	le := binary.LittleEndian
	if string(h[:4]) != bodyMagic {
		return fieldErr("body", "bad magic %q", h[:4])
	}
	if f := le.Uint32(h[4:]); f != BodyFormat {
		return fieldErr("body", "format %d, this reader knows %d", f, BodyFormat)
	}
	n, m := int64(le.Uint32(h[8:])), int64(le.Uint32(h[12:]))
	if n > MaxBodyTokens {
		return fieldErr("body", "%d tokens exceeds the limit of %d", n, MaxBodyTokens)
	}
	if m > MaxMessageBytes {
		return fieldErr("body", "JSON part of %d bytes exceeds the limit of %d", m, MaxMessageBytes)
	}
	// Read what the header promises, no more: a short body fails here
	// rather than after allocating for a lie.
	var raw bytes.Buffer
	if _, err := io.CopyN(&raw, zr, 13*n+m); err != nil {
		return fieldErr("body", "%d tokens and %d bytes of JSON promised: %v", n, m, err)
	}
	if k, _ := io.Copy(io.Discard, io.LimitReader(zr, 1)); k != 0 {
		return fieldErr("body", "bytes after the JSON part")
	}
	if err := zr.Close(); err != nil {
		return fieldErr("body", "%v", err)
	}
	d := raw.Bytes()
	r.Tokens, r.Logprobs, r.Versions, r.LossMask = make([]int32, n), make([]float32, n), make([]int32, n), make([]int8, n)
	for i := range n {
		r.Tokens[i] = int32(le.Uint32(d[4*i:]))
		r.Logprobs[i] = math.Float32frombits(le.Uint32(d[4*n+4*i:]))
		r.Versions[i] = int32(le.Uint32(d[8*n+4*i:]))
		r.LossMask[i] = int8(d[12*n+i])
	}
	var j bodyJSON
	if err := json.Unmarshal(d[13*n:], &j); err != nil {
		return fieldErr("body", "JSON part: %v", err)
	}
	if j.Messages == nil {
		j.Messages = []Message{}
	}
	if err := checkSegments(j.Segments, int(n)); err != nil {
		return err
	}
	r.Messages, r.Segments, r.Diff, r.Tests, r.Metadata = j.Messages, j.Segments, j.Diff, j.Tests, j.Metadata
	return nil
}

// checkSegments checks a result's segments against its n tokens: none, or
// starts that begin at 0 and rise, each a token's index.
func checkSegments(segs []int, n int) error {
	for i, s := range segs {
		switch {
		case i == 0 && s != 0:
			return fieldErr("segments", "the first segment starts at %d, not 0", s)
		case i > 0 && s <= segs[i-1]:
			return fieldErr("segments", "segment %d starts at %d, not after segment %d's %d", i, s, i-1, segs[i-1])
		case s >= n && !(i == 0 && n == 0):
			return fieldErr("segments", "segment %d starts at %d, past the %d tokens", i, s, n)
		}
	}
	return nil
}

// ErrBodyMismatch: a body is not the one its head names (size or digest).
var ErrBodyMismatch = errors.New("result body does not match its head")
