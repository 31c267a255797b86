package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/actloop/actloop/pkg/schema"
)

// sampleLine is a valid sample of exactly size bytes, padded in its
// metadata.
func sampleLine(t testing.TB, id string, size int) string {
	t.Helper()
	head := fmt.Sprintf(`{"v":1,"id":%q,"task":"t","env":{"backend":"sim"},"metadata":{"pad":"`, id)
	pad := size - len(head) - len(`"}}`)
	if pad < 0 {
		t.Fatalf("size %d too small", size)
	}
	return head + strings.Repeat("x", pad) + `"}}`
}

func TestReadSamplesLineLimit(t *testing.T) {
	const limit = schema.MaxSampleBytes
	tests := []struct {
		name    string
		in      string
		wantIDs []string
		wantErr []string // each in the error
	}{
		{"at the limit", sampleLine(t, "a", limit) + "\n" + sampleLine(t, "b", 100) + "\n", []string{"a", "b"}, nil},
		{"at the limit, CRLF, no final newline", sampleLine(t, "a", limit) + "\r\n" + sampleLine(t, "b", 100), []string{"a", "b"}, nil},
		{"at the limit, last line", "\n" + sampleLine(t, "a", limit), []string{"a"}, nil},
		{"one byte over", sampleLine(t, "a", 100) + "\n" + sampleLine(t, "b", limit+1) + "\n",
			nil, []string{fmt.Sprintf("line 2: %d bytes, over the limit of %d bytes for one sample (schema.MaxSampleBytes)", limit+1, limit)}},
		{"over, CRLF", sampleLine(t, "a", limit+1) + "\r\n",
			nil, []string{fmt.Sprintf("line 1: %d bytes, over the limit of %d", limit+2, limit)}},
		{"far over, then more lines read", sampleLine(t, "a", 100) + "\n" + sampleLine(t, "b", 5*limit) + "\n" +
			`{"v":1,"id":"c","env":{"backend":"sim"}}` + "\n" + sampleLine(t, "a", 200) + "\n" + sampleLine(t, "d", limit+1),
			nil, []string{
				fmt.Sprintf("line 2: %d bytes, over the limit of %d", 5*limit, limit),
				"line 3: task: missing",
				`line 4: id: "a" repeats line 1`,
				fmt.Sprintf("line 5: %d bytes, over the limit", limit+1),
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readSamples(strings.NewReader(tt.in))
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("readSamples: %v", err)
				}
				var ids []string
				for _, s := range got {
					ids = append(ids, s.ID)
				}
				if fmt.Sprint(ids) != fmt.Sprint(tt.wantIDs) {
					t.Fatalf("ids %v, want %v", ids, tt.wantIDs)
				}
				return
			}
			if err == nil || got != nil {
				t.Fatalf("readSamples = %d samples, %v; want an error", len(got), err)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// submit refuses group members at odds by line, and lists at most
// maxLineErrors bad lines, saying how many more it left out (issue 31,
// items 8 and 12).
func TestReadSamplesGroupsAndErrorCap(t *testing.T) {
	line := func(id string, index, size int) string {
		return fmt.Sprintf(`{"v":1,"id":%q,"task":"t","env":{"backend":"sim"},"group_id":"g1","group_index":%d,"group_size":%d}`, id, index, size)
	}
	_, err := readSamples(strings.NewReader(line("a", 0, 2) + "\n" + line("b", 0, 2) + "\n" + line("c", 1, 3) + "\n"))
	for _, w := range []string{"line 2 (b): group_index: 0 of group g1 is held by sample a", "line 3 (c): group_size: 3, but sample a of group g1 says 2"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v lacks %q", err, w)
		}
	}
	var bad strings.Builder
	for i := range maxLineErrors + 50 {
		fmt.Fprintf(&bad, `{"v":1,"id":"x-%d"}`+"\n", i)
	}
	_, err = readSamples(strings.NewReader(bad.String()))
	if err == nil || !strings.Contains(err.Error(), "50 more bad lines left out") || strings.Count(err.Error(), "\nline ") != maxLineErrors {
		t.Fatalf("error for %d bad lines: want %d listed and 50 left out, got %d lines listed", maxLineErrors+50, maxLineErrors,
			strings.Count(fmt.Sprint(err), "\nline "))
	}
}
