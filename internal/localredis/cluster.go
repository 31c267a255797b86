package localredis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of redis-server processes on loopback: its
// masters share the 16384 hash slots evenly and each has its replicas.
type Cluster struct {
	Masters  []*Server
	Replicas []*Server // Replicas[i*perMaster+j] replicates Masters[i]
	all      []*Server
}

// URL is the cluster as ACTLOOP_REDIS_URL names it (with
// ACTLOOP_REDIS_CLUSTER=true): every master as a seed node.
func (c *Cluster) URL() string {
	u := "redis://" + c.Masters[0].Addr
	for i, m := range c.Masters[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + m.Addr
	}
	return u
}

// Close stops every node.
func (c *Cluster) Close() {
	for _, s := range c.all {
		s.Close()
	}
}

// StartCluster starts masters redis-server nodes in cluster mode, each with
// perMaster replicas, joins them into one cluster (CLUSTER MEET, ADDSLOTS,
// REPLICATE) and waits until every node reports the cluster ok. A node not
// heard from for nodeTimeout is failed over (cluster-node-timeout).
func StartCluster(ctx context.Context, dir string, masters, perMaster int, nodeTimeout time.Duration) (_ *Cluster, err error) {
	if masters < 1 || masters > 16 || perMaster < 0 {
		return nil, fmt.Errorf("redis cluster: %d masters with %d replicas each: want 1..16 masters", masters, perMaster)
	}
	c := &Cluster{}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	for i := range masters * (1 + perMaster) {
		d := filepath.Join(dir, fmt.Sprintf("node-%d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		s, err := startReal(ctx, d, "", "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", fmt.Sprint(nodeTimeout.Milliseconds()), "--appendonly", "yes",
			"--appendfsync", "always", "--protected-mode", "no")
		if err != nil {
			return nil, fmt.Errorf("redis cluster node %d: %w", i, err)
		}
		c.all = append(c.all, s)
		if i < masters {
			c.Masters = append(c.Masters, s)
		} else {
			c.Replicas = append(c.Replicas, s)
		}
	}
	clients := make([]*redis.Client, len(c.all))
	for i, s := range c.all {
		clients[i] = redis.NewClient(&redis.Options{Addr: s.Addr})
		defer clients[i].Close()
	}
	for _, s := range c.all[1:] {
		host, port, _ := strings.Cut(s.Addr, ":")
		if err := clients[0].ClusterMeet(ctx, host, port).Err(); err != nil {
			return nil, fmt.Errorf("cluster meet %s: %w", s.Addr, err)
		}
	}
	per := 16384 / masters
	for i := range masters {
		lo, hi := i*per, (i+1)*per-1
		if i == masters-1 {
			hi = 16383
		}
		if err := clients[i].ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			return nil, fmt.Errorf("cluster addslots on %s: %w", c.Masters[i].Addr, err)
		}
	}
	// A replica can follow its master once it knows it.
	for j := range c.Replicas {
		master := clients[j/max(perMaster, 1)]
		id, err := master.ClusterMyID(ctx).Result()
		if err != nil {
			return nil, err
		}
		replica := clients[masters+j]
		if err := poll(ctx, func() error { return replica.ClusterReplicate(ctx, id).Err() }); err != nil {
			return nil, fmt.Errorf("cluster replicate %s to %s: %w", c.Replicas[j].Addr, id, err)
		}
	}
	for i, cl := range clients {
		err := poll(ctx, func() error {
			info, err := cl.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return errors.New("cluster_state not ok")
			}
			if i >= masters {
				repl, err := cl.Info(ctx, "replication").Result()
				if err != nil {
					return err
				}
				if !strings.Contains(repl, "master_link_status:up") {
					return errors.New("replica not in sync")
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("redis cluster node %s: %w", c.all[i].Addr, err)
		}
	}
	return c, nil
}

// poll calls f every 50ms until it succeeds, for at most 30s.
func poll(ctx context.Context, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-t.C:
		}
	}
}
