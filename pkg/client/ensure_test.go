package client

import (
	"strings"
	"testing"

	"github.com/actloop/actloop/pkg/schema"
)

func TestConsumerRequestValidate(t *testing.T) {
	tests := []struct {
		name    string
		req     ConsumerRequest
		wantErr bool
	}{
		{"results", ConsumerRequest{V: 1, Name: "trainer", Subject: schema.SubjectResults}, false},
		{"groups", ConsumerRequest{V: 1, Name: "trainer-groups", Subject: schema.SubjectGroups}, false},
		{"other subject", ConsumerRequest{V: 1, Name: "trainer", Subject: "actloop.events"}, true},
		{"empty name", ConsumerRequest{V: 1, Subject: schema.SubjectResults}, true},
		{"dotted name", ConsumerRequest{V: 1, Name: "a.b", Subject: schema.SubjectResults}, true},
		{"wildcard name", ConsumerRequest{V: 1, Name: "*", Subject: schema.SubjectResults}, true},
		{"service's", ConsumerRequest{V: 1, Name: schema.ConsumerCoordinatorResults, Subject: schema.SubjectGroups}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.req.Validate(); (err != nil) != tt.wantErr {
				t.Errorf("Validate() = %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

func TestConsumerRequestRun(t *testing.T) {
	for run, ok := range map[string]bool{"": true, "r20261207-ab12": true, "A_b-9": true, "a.b": false, "-a": false,
		"x*": false, strings.Repeat("r", 48): true, strings.Repeat("r", 49): false} {
		err := ConsumerRequest{V: 1, Name: "trainer", Subject: schema.SubjectResults, Run: run}.Validate()
		if (err == nil) != ok {
			t.Errorf("run %q: Validate() = %v, want ok %v", run, err, ok)
		}
	}
	if got := RunSubjectPrefix(schema.SubjectResults, "r1"); got != "actloop.results.r1~" || !strings.HasPrefix(schema.SubjectResult("r1.a.b"), got) ||
		strings.HasPrefix(schema.SubjectResult("r10.a"), got) {
		t.Errorf("RunSubjectPrefix(results, r1) = %q", got)
	}
	if got := RunSubjectPrefix(schema.SubjectGroups, "r1"); got != "actloop.groups.r1~" || !strings.HasPrefix(schema.SubjectGroup("r1.g"), got) {
		t.Errorf("RunSubjectPrefix(groups, r1) = %q", got)
	}
	cfg := ConsumerRequest{V: 1, Name: "n", Subject: schema.SubjectGroups, Run: "r1"}.Config()
	if cfg.Metadata[MetaRun] != "r1" || cfg.FilterSubject != schema.SubjectGroups || cfg.Durable != "n" {
		t.Errorf("Config() = %+v", cfg)
	}
}
