package sandbox

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"testing"
)

// appendFrame appends one frame of the Engine API's multiplexed stream.
func appendFrame(b []byte, stream byte, payload []byte) []byte {
	b = append(b, stream, 0, 0, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	return append(b, payload...)
}

func TestDemux(t *testing.T) {
	valid := appendFrame(appendFrame(appendFrame(nil, 1, []byte("out1\n")), 2, []byte("err1\n")), 1, []byte("out2\n"))
	tests := []struct {
		name               string
		in                 []byte
		wantOut, wantCombo string
		wantErr            error
	}{
		{"empty", nil, "", "", nil},
		{"frames in order", valid, "out1\nout2\n", "out1\nerr1\nout2\n", nil},
		{"empty frame", appendFrame(nil, 1, nil), "", "", nil},
		{"header cut", valid[:len(valid)-len("out2\n")-3], "out1\n", "out1\nerr1\n", io.ErrUnexpectedEOF},
		{"payload cut", valid[:len(valid)-2], "out1\nout", "out1\nerr1\nout", io.ErrUnexpectedEOF},
		{"unknown stream", appendFrame(nil, 3, []byte("x")), "", "", errFrame},
		{"padding", []byte{1, 0, 1, 0, 0, 0, 0, 0}, "", "", errFrame},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb, combo bytes.Buffer
			err := demux(bytes.NewReader(tt.in), &out, &errb)
			if !errors.Is(err, tt.wantErr) || out.String() != tt.wantOut {
				t.Fatalf("demux = stdout %q, error %v; want %q, %v", out.String(), err, tt.wantOut, tt.wantErr)
			}
			_ = demux(bytes.NewReader(tt.in), &combo, &combo)
			if combo.String() != tt.wantCombo {
				t.Fatalf("demux into one writer = %q, want %q", combo.String(), tt.wantCombo)
			}
		})
	}
}

// FuzzDemux checks that any input decodes without panic, and that frames
// built from the input decode back to their payloads, in order, also
// when read in pieces, and that a stream cut inside a frame is reported.
func FuzzDemux(f *testing.F) {
	f.Add([]byte("hello\nworld\n"), uint8(3), uint16(5))
	f.Add([]byte{}, uint8(0), uint16(0))
	f.Add(appendFrame(nil, 1, []byte("x")), uint8(1), uint16(9))
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 1, 'e'}, uint8(7), uint16(2))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8, cut uint16) {
		var sink bytes.Buffer
		_ = demux(bytes.NewReader(data), &sink, &sink) // must not panic

		n := int(chunk)%16 + 1
		var stream []byte
		var wantOut, wantErr, wantAll bytes.Buffer
		var ends []int // offsets where a frame ends
		for i := 0; i < len(data); i += n {
			p := data[i:min(i+n, len(data))]
			id := byte(1 + (i/n)%2)
			stream = appendFrame(stream, id, p)
			ends = append(ends, len(stream))
			wantAll.Write(p)
			if id == 1 {
				wantOut.Write(p)
			} else {
				wantErr.Write(p)
			}
		}
		var out, errb, all bytes.Buffer
		if err := demux(&oneByteReader{bytes.NewReader(stream)}, &out, &errb); err != nil {
			t.Fatalf("demux of valid frames: %v", err)
		}
		if !bytes.Equal(out.Bytes(), wantOut.Bytes()) || !bytes.Equal(errb.Bytes(), wantErr.Bytes()) {
			t.Fatalf("demux: stdout %q stderr %q, want %q %q", out.Bytes(), errb.Bytes(), wantOut.Bytes(), wantErr.Bytes())
		}
		if err := demux(bytes.NewReader(stream), &all, &all); err != nil || !bytes.Equal(all.Bytes(), wantAll.Bytes()) {
			t.Fatalf("demux into one writer = %q, %v; want %q", all.Bytes(), err, wantAll.Bytes())
		}
		if len(stream) == 0 {
			return
		}
		at := int(cut) % len(stream)
		err := demux(bytes.NewReader(stream[:at]), io.Discard, io.Discard)
		boundary := at == 0
		for _, e := range ends {
			boundary = boundary || e == at
		}
		if boundary && err != nil || !boundary && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("stream cut at %d (frame boundary %v): error %v", at, boundary, err)
		}
	})
}

type oneByteReader struct{ r io.Reader }

func (o *oneByteReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return o.r.Read(p[:1])
}

func TestImageAllowed(t *testing.T) {
	patterns := []string{"python:3.12", "node:*", "ghcr.io/org/*"}
	tests := []struct {
		image, def string
		want       bool
	}{
		{"base:1", "base:1", true},
		{"python:3.12", "", true},
		{"python:3.12-slim", "", false},
		{"node:20", "", true},
		{"node:", "", true},
		{"node", "", false},
		{"nodejs:20", "", false},
		{"ghcr.io/org/a/b:c", "", true},
		{"ghcr.io/org", "", false},
		{"", "", true}, // no image at all is reported elsewhere
		{"", "base:1", false},
	}
	for _, tt := range tests {
		if got := imageAllowed(tt.image, tt.def, patterns); got != tt.want {
			t.Errorf("imageAllowed(%q, default %q) = %v, want %v", tt.image, tt.def, got, tt.want)
		}
	}
	if imageAllowed("python:3.12", "", nil) || !imageAllowed("x/y:z", "", []string{"*"}) {
		t.Error("an empty list must allow nothing but the default, \"*\" everything")
	}
}

// FuzzParseDockerUser checks that only a canonical numeric uid:gid other
// than root's is accepted, and that it reads back as written.
func FuzzParseDockerUser(f *testing.F) {
	for _, s := range []string{"65534:65534", "0:0", "1000", "1000:", ":1000", "a:b", "01:1", "1:-1", "4294967296:1", "1:1:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		uid, gid, err := parseDockerUser(s)
		if err != nil {
			return
		}
		if uid <= 0 || gid < 0 || fmt.Sprintf("%d:%d", uid, gid) != s {
			t.Fatalf("parseDockerUser(%q) = %d, %d, nil", s, uid, gid)
		}
	})
}

func TestPickAPIVersion(t *testing.T) {
	tests := []struct {
		name, engineMin, engineMax string
		want                       string
		wantErr                    error
	}{
		{"docker 20.10", "1.12", "1.41", "1.41", nil},
		{"docker 24", "1.12", "1.43", "1.43", nil},
		{"docker 29", "1.44", "1.52", "1.52", nil},
		{"newer than the backend", "1.44", "1.70", dockerMaxAPI, nil},
		{"no minimum said", "", "1.47", "1.47", nil},
		{"two-digit minor compared as a number", "1.9", "2.1", dockerMaxAPI, nil},
		{"too old", "1.12", "1.40", "", ErrDockerAPIVersion},
		{"minimum above the backend's", "1.56", "1.60", "", ErrDockerAPIVersion},
		{"garbage", "", "latest", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := pickAPIVersion(tt.engineMin, tt.engineMax)
			switch {
			case tt.want == "" && tt.wantErr == nil:
				if err == nil {
					t.Fatalf("pickAPIVersion(%q, %q) = %q, want an error", tt.engineMin, tt.engineMax, got)
				}
			case got != tt.want || !errors.Is(err, tt.wantErr):
				t.Fatalf("pickAPIVersion(%q, %q) = %q, %v; want %q, %v", tt.engineMin, tt.engineMax, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestVersionRefused(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{&apiError{status: 400, message: "client version 1.43 is too new. Maximum supported API version is 1.41"}, true},
		{&apiError{status: 400, message: "client version 1.43 is too old. Minimum supported API version is 1.44, please upgrade your client to a newer version"}, true},
		{fmt.Errorf("start: %w", &apiError{status: 400, message: "client version 1.43 is too old. Minimum supported API version is 1.44"}), true},
		{&apiError{status: 400, message: "invalid mount config"}, false},
		{&apiError{status: 404, message: "client version 1.43 is too new"}, false},
		{errors.New("client version 1.43 is too new"), false},
		{nil, false},
	}
	for _, tt := range tests {
		if got := versionRefused(tt.err); got != tt.want {
			t.Errorf("versionRefused(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
