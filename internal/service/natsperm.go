package service

import "strings"

// NATSPermissions is what one NATS client may publish and subscribe to, as a
// user's permissions block in nats-server's authorization has it.
type NATSPermissions struct {
	Publish, Subscribe []string
	// Responses: it may answer each request it receives once
	// (allow_responses).
	Responses bool
}

// The NATS clients of actloop, as docs/security.md's permissions table
// names them.
const (
	NATSEveryService = "every service"
	NATSCoordinator  = "coordinator"
	NATSGenWorker    = "gen-worker"
	NATSEnvWorker    = "env-worker"
	NATSPredictor    = "predictor-gw"
	NATSTrainer      = "CLI (trainer)"
)

// NATSTable is docs/security.md's permissions table, by client, with the
// placeholders <replica> (a gen-worker's ACTLOOP_REPLICA) and <id> (an
// env-worker's ACTLOOP_ENV_WORKER_ID). A service's permissions are its row
// and NATSEveryService's (NATSPermissionsOf). cmd/actloop's tests check the
// documentation, deploy/nats.conf and the Helm chart against it and run
// every client under it.
var NATSTable = map[string]NATSPermissions{
	NATSEveryService: {
		Publish:   []string{"$JS.API.>", "$JS.FC.>", "actloop.dlq"},
		Subscribe: []string{"_INBOX.>"},
	},
	NATSCoordinator: {
		Publish: []string{"actloop.env.>", "actloop.gen.>", "actloop.results.>", "$O.ACTLOOP_RESULT_BODIES.>",
			"actloop.groups.>", "actloop.predict", "$JS.ACK.ACTLOOP_SAMPLES.>", "$JS.ACK.ACTLOOP_RESULTS.>",
			"$JS.ACK.ACTLOOP_EVENTS.>", "$KV.actloop_priority.>", "$KV.actloop_control.state",
			"$KV.actloop_leader.coordinator", "$KV.actloop_admitted.>"},
		Subscribe: []string{"actloop.control.*"},
		Responses: true,
	},
	NATSGenWorker: {
		Publish: []string{"actloop.gen.>", "actloop.env.>", "actloop.events", "actloop.predictions", "actloop.predict",
			"$JS.ACK.ACTLOOP_GEN.>", "$KV.actloop_heartbeats.gen.<replica>.>", "$KV.actloop_control.gen.<replica>.>"},
		Subscribe: []string{"actloop.gen.<replica>.*"},
	},
	NATSEnvWorker: {
		Publish: []string{"actloop.gen.>", "actloop.env.>", "actloop.results.>", "$O.ACTLOOP_RESULT_BODIES.>",
			"actloop.events", "actloop.predictions", "$JS.ACK.ACTLOOP_ENV.>", "$KV.actloop_heartbeats.env.<id>"},
		Subscribe: []string{"actloop.env.<id>", "actloop.env.start"},
	},
	NATSPredictor: {
		Publish:   []string{"$JS.ACK.ACTLOOP_RESULTS.>"},
		Subscribe: []string{"actloop.predict"},
		Responses: true,
	},
	NATSTrainer: {
		Publish:   []string{"$JS.API.>", "$JS.FC.>", "actloop.samples", "actloop.control.*", "$JS.ACK.ACTLOOP_RESULTS.>"},
		Subscribe: []string{"_INBOX.>"},
	},
}

// NATSPermissionsOf returns what client (a NATSTable key other than
// NATSEveryService) may do, its row joined with NATSEveryService's for a
// service, the placeholders filled in with id (the gen-worker's replica,
// the env-worker's id; ignored for the others).
func NATSPermissionsOf(client, id string) NATSPermissions {
	rows := []NATSPermissions{NATSTable[NATSEveryService], NATSTable[client]}
	if client == NATSTrainer {
		rows = rows[1:]
	}
	fill := strings.NewReplacer("<replica>", id, "<id>", id)
	var p NATSPermissions
	for _, r := range rows {
		for _, s := range r.Publish {
			p.Publish = append(p.Publish, fill.Replace(s))
		}
		for _, s := range r.Subscribe {
			p.Subscribe = append(p.Subscribe, fill.Replace(s))
		}
		p.Responses = p.Responses || r.Responses
	}
	return p
}
