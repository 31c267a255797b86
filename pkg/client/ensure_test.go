package client

import (
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
