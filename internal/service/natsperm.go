package service

import (
	"maps"
	"slices"
	"strings"

	"github.com/actloop/actloop/pkg/schema"
)

// NATSPermissions is what one NATS client may publish and subscribe to, as a
// user's permissions block in nats-server's authorization has it.
type NATSPermissions struct {
	Publish, Subscribe []string
	// PublishDeny are subjects refused even where Publish allows them
	// (publish's deny, which wins over its allow).
	PublishDeny []string
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
	NATSGateway      = "gateway"
)

// NATSTable is docs/security.md's permissions table, by client, with the
// placeholders <replica> (a gen-worker's ACTLOOP_REPLICA) and <id> (an
// env-worker's ACTLOOP_ENV_WORKER_ID). A service's permissions are its row
// and NATSEveryService's (NATSPermissionsOf); the trainer's and the
// gateway's are their row alone. JetStream's API is granted
// subject by subject: each stream's and consumer's calls a client makes
// (the subjects of nats.go's jetstream package), no other; where a row
// grants consumers by wildcard, its PublishDeny keeps the services'
// consumers out of it. cmd/actloop's tests check the documentation,
// deploy/nats.conf and the Helm chart against it and run every client,
// recovery included, under it.
var NATSTable = map[string]NATSPermissions{
	NATSEveryService: {
		// Every service declares every stream and bucket at start, so they
		// may start in any order.
		Publish:   append(append([]string{"$JS.API.INFO"}, declare(declaredStreams...)...), "$JS.FC.>", "actloop.dlq"),
		Subscribe: []string{"_INBOX.>"},
	},
	NATSCoordinator: {
		Publish: slices.Concat(
			pull("ACTLOOP_SAMPLES", "coordinator-samples", "actloop.samples"),
			pull("ACTLOOP_EVENTS", "coordinator-events", "actloop.events"),
			pull("ACTLOOP_EVENTS", "coordinator-predictions", "actloop.predictions"),
			pull("ACTLOOP_RESULTS", resultsConsumers[NATSCoordinator], "actloop.results.>"),
			[]string{
				// The trainers' consumers of results and groups, made on
				// their behalf (actloop.consumers.create): pull consumers
				// only, which the trainer's user cannot be held to.
				"$JS.API.CONSUMER.CREATE.ACTLOOP_RESULTS.*.actloop.results.>", "$JS.API.CONSUMER.CREATE.ACTLOOP_RESULTS.*.actloop.groups.>",
				// The status's and the metrics' samples not yet taken in
				// (its samples consumer's info) and queues.
				"$JS.API.CONSUMER.INFO.ACTLOOP_SAMPLES.coordinator-samples",
				"$JS.API.CONSUMER.LIST.ACTLOOP_SAMPLES", "$JS.API.CONSUMER.LIST.ACTLOOP_GEN", "$JS.API.CONSUMER.LIST.ACTLOOP_ENV",
				"$JS.API.STREAM.MSG.GET.ACTLOOP_SAMPLES", "$JS.API.STREAM.MSG.GET.ACTLOOP_GEN", "$JS.API.STREAM.MSG.GET.ACTLOOP_ENV",
			},
			declare("KV_actloop_leader"),
			kvRead("actloop_leader", "coordinator"), kvRead("actloop_control", ">"), kvRead("actloop_heartbeats", ">"),
			kvRead("actloop_priority", ">"), kvRead("actloop_admitted", ">"),
			objectWrite,
			[]string{"actloop.env.>", "actloop.gen.>", "actloop.results.>", "actloop.groups.>", "actloop.predict", "actloop.events",
				"actloop.cancel", "$KV.actloop_priority.>", "$KV.actloop_control.state", "$KV.actloop_leader.coordinator", "$KV.actloop_admitted.>"}),
		Subscribe: []string{"actloop.control.*", "actloop.consumers.create"},
		Responses: true,
	},
	NATSGenWorker: {
		Publish: slices.Concat(
			pull("ACTLOOP_GEN", "gen-<replica>-hi", "actloop.gen.<replica>.hi"),
			pull("ACTLOOP_GEN", "gen-<replica>-rhi", "actloop.gen.<replica>.rhi"),
			pull("ACTLOOP_GEN", "gen-<replica>-rlo", "actloop.gen.<replica>.rlo"),
			[]string{
				// Its own low class and, to steal, any replica's.
				"$JS.API.CONSUMER.CREATE.ACTLOOP_GEN.*.actloop.gen.*.lo", "$JS.API.CONSUMER.INFO.ACTLOOP_GEN.*",
				"$JS.API.CONSUMER.MSG.NEXT.ACTLOOP_GEN.*", "$JS.API.STREAM.MSG.GET.ACTLOOP_GEN",
			},
			kvRead("actloop_control", "state"), kvRead("actloop_priority", ">"), kvRead("actloop_heartbeats", ">"),
			[]string{"actloop.gen.>", "actloop.env.>", "actloop.events", "actloop.predictions", "actloop.predict",
				// A stolen step is acknowledged on the victim's low consumer,
				// whose name (gen-<replica>-lo) no wildcard token matches
				// alone: acknowledgements on the whole stream.
				"$JS.ACK.ACTLOOP_GEN.>", "$KV.actloop_heartbeats.gen.<replica>.>", "$KV.actloop_control.gen.<replica>.>"}),
		Subscribe: []string{"actloop.gen.<replica>.*", "actloop.cancel"},
	},
	NATSEnvWorker: {
		Publish: slices.Concat(
			pull("ACTLOOP_ENV", "env-<id>", "actloop.env.<id>"),
			pull("ACTLOOP_ENV", "env-start", "actloop.env.start"),
			kvRead("actloop_control", "state"), kvRead("actloop_priority", ">"),
			objectWrite,
			[]string{"actloop.gen.>", "actloop.env.>", "actloop.results.>", "actloop.events", "actloop.predictions",
				"$KV.actloop_heartbeats.env.<id>"}),
		Subscribe: []string{"actloop.env.<id>", "actloop.env.start"},
	},
	NATSPredictor: {
		Publish:   pull("ACTLOOP_RESULTS", resultsConsumers[NATSPredictor], "actloop.results.>"),
		Subscribe: []string{"actloop.predict"},
		Responses: true,
	},
	NATSTrainer: trainerPermissions,
	// The HTTP trainer API makes a trainer's calls on its callers' behalf,
	// and no other.
	NATSGateway: trainerPermissions,
}

// trainerPermissions are the trainer's: creating the streams it uses (not
// updating them: their settings are the services'), submitting samples,
// asking for, pulling from and acknowledging on its consumers of results
// and groups, reading their bodies, and the control calls; no consumer
// create call at all. The CLI and the gateway
// have them, without NATSEveryService's.
var trainerPermissions = NATSPermissions{
	Publish: slices.Concat(
		create("ACTLOOP_SAMPLES", "ACTLOOP_EVENTS", "ACTLOOP_GEN", "ACTLOOP_ENV", "ACTLOOP_RESULTS", "ACTLOOP_DLQ"),
		[]string{
			// Its consumers of results and groups, by names of its choosing,
			// which the coordinator creates (actloop.consumers.create): it
			// may create no consumer itself, since permissions cannot look
			// into a create request, and one with a deliver subject would
			// have the server publish on any subject of the account, the
			// services' work streams included (issue 31).
			"actloop.consumers.create",
			"$JS.API.CONSUMER.MSG.NEXT.ACTLOOP_RESULTS.*", "$JS.API.CONSUMER.INFO.ACTLOOP_RESULTS.*",
			// Result bodies: an object's metadata and its chunks, by direct
			// gets (pkg/client's Bodies), not through a consumer: one with a
			// deliver subject would have the server publish the chunks on
			// any subject of the account (issue 31).
			"$JS.API.STREAM.INFO.OBJ_ACTLOOP_RESULT_BODIES",
			"$JS.API.DIRECT.GET.OBJ_ACTLOOP_RESULT_BODIES.$O.ACTLOOP_RESULT_BODIES.M.>",
			"$JS.API.DIRECT.GET.OBJ_ACTLOOP_RESULT_BODIES",
			"$JS.FC.>", "actloop.samples", "actloop.control.*",
			// Acknowledgements on its consumers, of any name.
			"$JS.ACK.ACTLOOP_RESULTS.>",
		}),
	Subscribe: []string{"_INBOX.>"},
	// Its names are any but the services': it may not create, update,
	// inspect, pull from or acknowledge on their consumers of results.
	PublishDeny: notOn("ACTLOOP_RESULTS", slices.Sorted(maps.Values(resultsConsumers))...),
}

// resultsConsumers are the services' durable consumers on ACTLOOP_RESULTS,
// by client: the rows of their clients grant them, the trainer's deny
// them.
var resultsConsumers = map[string]string{
	NATSCoordinator: schema.ConsumerCoordinatorResults,
	NATSPredictor:   schema.ConsumerPredictorHistory,
}

// notOn is what a client granted the consumers of stream by wildcard
// (creating, inspecting, pulling, acknowledging) is refused on consumers.
func notOn(stream string, consumers ...string) []string {
	var out []string
	for _, c := range consumers {
		out = append(out, "$JS.API.CONSUMER.CREATE."+stream+"."+c+".>",
			"$JS.API.CONSUMER.MSG.NEXT."+stream+"."+c,
			"$JS.API.CONSUMER.INFO."+stream+"."+c,
			"$JS.ACK."+stream+"."+c+".>")
	}
	return out
}

// declaredStreams are the streams every service declares: the work
// streams, and those under the KV buckets and the object store.
var declaredStreams = []string{"ACTLOOP_SAMPLES", "ACTLOOP_EVENTS", "ACTLOOP_GEN", "ACTLOOP_ENV", "ACTLOOP_RESULTS", "ACTLOOP_DLQ",
	"KV_actloop_priority", "KV_actloop_heartbeats", "KV_actloop_control", "KV_actloop_admitted", "OBJ_ACTLOOP_RESULT_BODIES"}

// declare is what creating or updating the streams takes (CreateOrUpdate
// looks first).
func declare(streams ...string) []string {
	var out []string
	for _, s := range streams {
		out = append(out, "$JS.API.STREAM.INFO."+s, "$JS.API.STREAM.CREATE."+s, "$JS.API.STREAM.UPDATE."+s)
	}
	return out
}

// create is what creating the streams that do not exist takes
// (bus.Topology.CreateStreams): a trainer's, which never changes a stream.
func create(streams ...string) []string {
	var out []string
	for _, s := range streams {
		out = append(out, "$JS.API.STREAM.INFO."+s, "$JS.API.STREAM.CREATE."+s)
	}
	return out
}

// pull is what a durable pull consumer takes: creating (or updating) it on
// stream, filtered to subject, pulling from it and acknowledging what it
// delivers (the reply subjects $JS.ACK.<stream>.<consumer>.…), so a client
// cannot acknowledge, and so lose, another consumer's messages.
func pull(stream, consumer, subject string) []string {
	return []string{"$JS.API.CONSUMER.CREATE." + stream + "." + consumer + "." + subject,
		"$JS.API.CONSUMER.MSG.NEXT." + stream + "." + consumer,
		"$JS.ACK." + stream + "." + consumer + ".>"}
}

// kvRead is what reading keys of bucket takes: a get (a direct get), and a
// watch or a listing of keys (an ordered consumer of a name of its own).
func kvRead(bucket, keys string) []string {
	return []string{"$JS.API.DIRECT.GET.KV_" + bucket + ".$KV." + bucket + "." + keys,
		"$JS.API.CONSUMER.CREATE.KV_" + bucket + ".*.$KV." + bucket + "." + keys,
		"$JS.API.CONSUMER.DELETE.KV_" + bucket + ".*"}
}

// objectWrite is what storing result bodies takes: the chunks and the
// metadata, a look for an object of the same name, and purging its old
// chunks when there is one.
var objectWrite = []string{"$O.ACTLOOP_RESULT_BODIES.>",
	"$JS.API.DIRECT.GET.OBJ_ACTLOOP_RESULT_BODIES.$O.ACTLOOP_RESULT_BODIES.M.>",
	"$JS.API.STREAM.PURGE.OBJ_ACTLOOP_RESULT_BODIES"}

// NATSPermissionsOf returns what client (a NATSTable key other than
// NATSEveryService) may do, its row joined with NATSEveryService's for a
// service other than the gateway, the placeholders filled in with id (the gen-worker's replica,
// the env-worker's id; ignored for the others).
func NATSPermissionsOf(client, id string) NATSPermissions {
	rows := []NATSPermissions{NATSTable[NATSEveryService], NATSTable[client]}
	if client == NATSTrainer || client == NATSGateway {
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
		for _, s := range r.PublishDeny {
			p.PublishDeny = append(p.PublishDeny, fill.Replace(s))
		}
		p.Responses = p.Responses || r.Responses
	}
	return p
}
