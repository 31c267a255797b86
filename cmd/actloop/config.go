package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/service"
)

func newConfigCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "config",
		Short: "Print server configuration for a deployment",
		Long: `Print configuration a deployment's servers need that follows from its shape
(see 'actloop config nats').`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprint(cmd.ErrOrStderr(), cmd.UsageString())
			return usageError(errors.New("config: name what to print (nats)"))
		},
	}
	c.AddCommand(newConfigNATSCmd())
	return c
}

func newConfigNATSCmd() *cobra.Command {
	var replicas, envWorkers []string
	c := &cobra.Command{
		Use:   "nats --replicas r0,r1 --env-workers env-worker-0",
		Short: "Print nats-server's authorization block for the given replicas and env-workers",
		Long: `Print the authorization block of a nats-server configuration: a user for
each actloop service with exactly its permissions of docs/security.md's table
(internal/service's NATSTable), one gen-worker user per replica
(gen-worker-<replica>, its <replica> filled in) and one env-worker user per
env-worker id (the user is the id, its <id> filled in), then predictor-gw,
trainer and gateway. Each password is $NATS_PASSWORD_<USER> (the user in
upper case, - as _), taken from nats-server's environment.

Scaling the inference replicas is a regeneration: print the block for the new
list, replace the authorization block of the server's configuration with it
and reload the server (nats-server --signal reload). deploy/nats.conf's block
is this command's output for --replicas r0,r1 --env-workers env-worker-0.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := natsAuthorization(replicas, envWorkers)
			if err != nil {
				return usageError(fmt.Errorf("config nats: %w", err))
			}
			_, err = io.WriteString(cmd.OutOrStdout(), s)
			return err
		},
	}
	c.Flags().StringSliceVar(&replicas, "replicas", nil, "the inference replicas (each gen-worker's ACTLOOP_REPLICA), comma-separated")
	c.Flags().StringSliceVar(&envWorkers, "env-workers", nil, "the env-workers' ids (ACTLOOP_ENV_WORKER_ID), comma-separated")
	return c
}

// natsUserEntry is one user of nats-server's authorization block.
type natsUserEntry struct {
	user  string
	perms service.NATSPermissions
}

// natsAuthorization is nats-server's authorization block for the
// services with replicas and env-workers (by id), as deploy/nats.conf has
// it.
func natsAuthorization(replicas, envWorkers []string) (string, error) {
	var errs []error
	check := func(flag string, names []string) {
		if len(names) == 0 {
			errs = append(errs, fmt.Errorf("--%s: at least one", flag))
		}
		for i, n := range names {
			switch {
			case !bus.ValidName(n):
				errs = append(errs, fmt.Errorf("--%s: %q is not a valid name ([A-Za-z0-9_-], not \"start\")", flag, n))
			case slices.Contains(names[:i], n):
				errs = append(errs, fmt.Errorf("--%s: %q is listed twice", flag, n))
			}
		}
	}
	check("replicas", replicas)
	check("env-workers", envWorkers)
	if err := errors.Join(errs...); err != nil {
		return "", err
	}
	users := []natsUserEntry{{service.NATSCoordinator, service.NATSPermissionsOf(service.NATSCoordinator, "")}}
	for _, r := range replicas {
		users = append(users, natsUserEntry{"gen-worker-" + r, service.NATSPermissionsOf(service.NATSGenWorker, r)})
	}
	for _, id := range envWorkers {
		users = append(users, natsUserEntry{id, service.NATSPermissionsOf(service.NATSEnvWorker, id)})
	}
	users = append(users,
		natsUserEntry{service.NATSPredictor, service.NATSPermissionsOf(service.NATSPredictor, "")},
		natsUserEntry{"trainer", service.NATSPermissionsOf(service.NATSTrainer, "")},
		natsUserEntry{service.NATSGateway, service.NATSPermissionsOf(service.NATSGateway, "")})
	seen := map[string]bool{}
	for _, u := range users {
		if seen[u.user] {
			return "", fmt.Errorf("--env-workers: %q is another service's user", u.user)
		}
		seen[u.user] = true
	}
	var b strings.Builder
	b.WriteString("authorization {\n  users = [\n")
	for _, u := range users {
		fmt.Fprintf(&b, "    {\n      user: %s\n      password: $NATS_PASSWORD_%s\n      permissions: {\n", u.user,
			strings.ToUpper(strings.ReplaceAll(u.user, "-", "_")))
		fmt.Fprintf(&b, "        publish: {allow: %s", quoteList(u.perms.Publish))
		if len(u.perms.PublishDeny) > 0 {
			fmt.Fprintf(&b, ", deny: %s", quoteList(u.perms.PublishDeny))
		}
		fmt.Fprintf(&b, "}\n        subscribe: {allow: %s}\n", quoteList(u.perms.Subscribe))
		if u.perms.Responses {
			b.WriteString("        allow_responses: true\n")
		}
		b.WriteString("      }\n    }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String(), nil
}

// quoteList is subjects as a list of quoted strings.
func quoteList(subjects []string) string {
	q := make([]string, len(subjects))
	for i, s := range subjects {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
