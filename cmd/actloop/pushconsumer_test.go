package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/devstack"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/service/servicetest"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/pkg/schema"
)

// pushTargets are subjects a push consumer's deliveries would land on
// in the services' work streams, where no consumer reads them (issue 31).
var pushTargets = []string{"actloop.events", "actloop.samples", "actloop.gen.r0.hi", "actloop.env.start", "actloop.dlq",
	"actloop.gen.r1.lo"}

// A consumer with a deliver subject is published by the server in the
// account, whatever the creating user may publish: a trainer (the CLI, the
// gateway; as docs/security.md grants them and as `actloop dev` does) is
// refused creating one on the results' stream and on the bodies' object
// store, by every form of the create subject, and no message lands in the
// work streams. nats-server checks a deliver subject only against the
// consumer's own stream's subjects (deliveryFormsCycle in consumer.go) and
// permissions cannot see the request's body, so the trainer must be
// refused the create subjects themselves.
func TestTrainerCannotCreatePushConsumers(t *testing.T) {
	perms := documentedPermissions(t)
	const password = "push-test-pass"
	dev := func(name, client string) *server.User {
		return &server.User{Username: name, Password: password,
			Permissions: devstack.ServerPermissions(service.NATSPermissionsOf(client, ""))}
	}
	srv := servicetest.StartNATS(t, server.Options{Users: []*server.User{
		natsUser("trainer", password, nil, perms["CLI (trainer)"]),
		natsUser("gateway", password, nil, perms["gateway"]),
		dev("dev-trainer", service.NATSTrainer),
		dev("dev-gateway", service.NATSGateway),
		{Username: "admin", Password: password},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	_, admin, _ := connectAs(t, srv, "admin", password)
	common := service.CommonDefaults()
	top := common.Topology()
	top.Memory = true
	if err := top.EnsureStreams(ctx, admin); err != nil {
		t.Fatal(err)
	}
	obs, err := top.ResultBodies(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	body, err := obs.PutBytes(ctx, "t1", []byte(strings.Repeat("body ", 1000)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Publish(ctx, "actloop.results.t1", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	bodies := "OBJ_" + schema.BucketResultBodies
	sources := []struct{ stream, filter string }{
		{schema.StreamResults, schema.SubjectResults},
		{bodies, "$O." + schema.BucketResultBodies + ".C." + body.NUID},
	}
	for _, src := range sources {
		t.Run(src.stream, func(t *testing.T) {
			tryPushConsumers(t, srv, password, src.stream, src.filter)
			// Nothing was created that could deliver later, and nothing
			// landed.
			s, err := admin.Stream(ctx, src.stream)
			if err != nil {
				t.Fatal(err)
			}
			for name := range s.ConsumerNames(ctx).Name() {
				t.Errorf("%s: consumer %s left by a trainer", src.stream, name)
			}
			for _, name := range []string{schema.StreamSamples, schema.StreamDLQ, bus.StreamGen, bus.StreamEnv, bus.StreamEvents} {
				s, err := admin.Stream(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				info, err := s.Info(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if info.State.Msgs != 0 {
					t.Errorf("%s holds %d messages from a trainer's push consumers", name, info.State.Msgs)
				}
			}
		})
	}
}

// tryPushConsumers tries, as each trainer user, to create a push consumer
// of stream (filtered to filter) delivering on each of pushTargets, by each
// form of the create subject, and fails the test on any the server accepts.
func tryPushConsumers(t *testing.T, srv *server.Server, password, stream, filter string) {
	t.Helper()
	for _, user := range []string{"trainer", "gateway", "dev-trainer", "dev-gateway"} {
		nc, _, r := connectAs(t, srv, user, password)
		refusedTimes := func(subject string) int {
			n := 0
			for _, e := range r.get() {
				if strings.Contains(e, fmt.Sprintf("Publish to %q", subject)) {
					n++
				}
			}
			return n
		}
		n := 0
		for _, deliver := range pushTargets {
			n++
			name := fmt.Sprintf("evil%d-%s", n, user)
			forms := []struct {
				subject string
				durable bool
			}{
				{"$JS.API.CONSUMER.CREATE." + stream, false},
				{"$JS.API.CONSUMER.CREATE." + stream + "." + name, false},
				{"$JS.API.CONSUMER.CREATE." + stream + "." + name + "." + filter, false},
				{"$JS.API.CONSUMER.DURABLE.CREATE." + stream + "." + name, true},
			}
			for _, f := range forms {
				cfg := map[string]any{"name": name, "deliver_subject": deliver, "filter_subject": filter,
					"ack_policy": "none", "deliver_policy": "all"}
				if f.durable {
					cfg["durable_name"] = name
				}
				req, err := json.Marshal(map[string]any{"stream_name": stream, "config": cfg})
				if err != nil {
					t.Fatal(err)
				}
				replies := make(chan *nats.Msg, 1)
				inbox := nats.NewInbox()
				sub, err := nc.ChanSubscribe(inbox, replies)
				if err != nil {
					t.Fatal(err)
				}
				before := refusedTimes(f.subject)
				if err := nc.PublishRequest(f.subject, inbox, req); err != nil {
					t.Fatal(err)
				}
				var reply *nats.Msg
				testkit.Eventually(t, 10*time.Second, user+": an answer to "+f.subject, func() bool {
					select {
					case reply = <-replies:
						return true
					default:
						return refusedTimes(f.subject) > before
					}
				})
				_ = sub.Unsubscribe()
				if reply != nil && !strings.Contains(string(reply.Data), `"error"`) {
					t.Errorf("%s: %s with deliver subject %s accepted: %s", user, f.subject, deliver, reply.Data)
				}
			}
		}
	}
}
