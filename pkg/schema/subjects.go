package schema

// Subjects and streams a trainer uses. The rest of actloop's subjects are
// internal (see docs/trainer-api.md for the whole list).
const (
	// SubjectSamples takes samples (Sample), in stream StreamSamples.
	SubjectSamples = "actloop.samples"
	// SubjectResults carries finished trajectories (Result), in stream
	// StreamResults.
	SubjectResults = "actloop.results"
	// SubjectGroups carries a GroupDone when every rollout of a group has a
	// result; it is in StreamResults, after its members.
	SubjectGroups = "actloop.groups"
	// SubjectDLQ carries dead letters (DLQEntry), in stream StreamDLQ.
	SubjectDLQ = "actloop.dlq"
	// Trainer API, NATS request-reply (the coordinator answers).
	SubjectControlPause  = "actloop.control.pause"
	SubjectControlResume = "actloop.control.resume"
	SubjectControlGet    = "actloop.control.get"

	StreamSamples = "ACTLOOP_SAMPLES"
	StreamResults = "ACTLOOP_RESULTS"
	StreamDLQ     = "ACTLOOP_DLQ"
)
