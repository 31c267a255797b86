package schema

import "strings"

// Subjects and streams a trainer uses. The rest of actloop's subjects are
// internal (see docs/trainer-api.md for the whole list).
const (
	// SubjectSamples takes samples (Sample), in stream StreamSamples.
	SubjectSamples = "actloop.samples"
	// SubjectResults matches every result: each trajectory's result (the
	// head of a Result) is the one message on SubjectResult(traj_id), in
	// stream StreamResults.
	SubjectResults = "actloop.results.>"
	// SubjectGroups matches every GroupDone: each group's is the one
	// message on SubjectGroup(group_id), in StreamResults after its
	// members' results.
	SubjectGroups = "actloop.groups.>"
	// SubjectDLQ carries dead letters (DLQEntry), in stream StreamDLQ.
	SubjectDLQ = "actloop.dlq"
	// Trainer API, NATS request-reply (the coordinator answers).
	SubjectControlPause  = "actloop.control.pause"
	SubjectControlResume = "actloop.control.resume"
	SubjectControlGet    = "actloop.control.get"
	SubjectControlAbort  = "actloop.control.abort"

	// HeaderClient names the client of a control call over NATS (user and
	// host), for the coordinator's audit; pkg/control sets it.
	HeaderClient = "Actloop-Client"

	StreamSamples = "ACTLOOP_SAMPLES"
	StreamResults = "ACTLOOP_RESULTS"
	StreamDLQ     = "ACTLOOP_DLQ"

	// The services' durable consumers on StreamResults: the coordinator's
	// and predictor-gw's. A trainer's consumers need other names (its
	// NATS user is denied these).
	ConsumerCoordinatorResults = "coordinator-results"
	ConsumerPredictorHistory   = "predictor-history"

	resultsPrefix = "actloop.results."
	groupsPrefix  = "actloop.groups."
)

// SubjectResult is the subject of trajectory id's result. The stream holds
// one message on it ever: a second publish is refused
// (Nats-Expected-Last-Subject-Sequence: 0), so a trajectory has one result
// however often it is published.
func SubjectResult(trajID string) string { return resultsPrefix + SubjectToken(trajID) }

// SubjectGroup is the subject of group id's GroupDone; one message ever,
// as for SubjectResult.
func SubjectGroup(groupID string) string { return groupsPrefix + SubjectToken(groupID) }

// IsResult reports whether subject is a result's (SubjectResult).
func IsResult(subject string) bool { return strings.HasPrefix(subject, resultsPrefix) }

// IsGroup reports whether subject is a GroupDone's (SubjectGroup).
func IsGroup(subject string) bool { return strings.HasPrefix(subject, groupsPrefix) }

// SubjectToken is id as one NATS subject token: an id
// ([A-Za-z0-9._-]) with each "." written "~" (which no id holds).
func SubjectToken(id string) string { return strings.ReplaceAll(id, ".", "~") }

// ServiceConsumer reports whether name is one of the services' consumers
// on StreamResults, which a trainer may not use.
func ServiceConsumer(name string) bool {
	return name == ConsumerCoordinatorResults || name == ConsumerPredictorHistory
}
