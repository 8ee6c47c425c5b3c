package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// TestMemberShards: a source split into 2 buckets (shards: 2) on an entry
// listing two databases, run by two replicas. Each database's copy of the
// source is split on its own: its buckets' leases are
// orders@split/<database>/0 and /1, shared by the replicas of that
// database; every row is delivered; status groups each database's bucket
// leases into its source, the replicas of each database are counted
// against its buckets, each bucket is relayed by one replica (the shard
// gauge), and the console of either replica charts both databases'
// sources from the samples their holders wrote in each database.
func TestMemberShards(t *testing.T) {
	t.Parallel()
	const rowsEach, keys = 40, 20
	ctx := context.Background()
	dsnA, poolA := pgtest.NewDB(t)
	dsnB, poolB := pgtest.NewDB(t)
	pools := []*pgxpool.Pool{poolA, poolB}
	var members []string
	for i, d := range []string{dsnA, dsnB} {
		pgtest.Exec(t, pools[i], tenantDDL)
		u, err := url.Parse(d)
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, "split/"+strings.TrimPrefix(u.Path, "/"))
	}
	c := kafkaCluster(t, kfake.SeedTopics(1, "split"))
	cfg := &config.Config{
		Admin:     config.Admin{Listen: "127.0.0.1:0"},
		LeaseTTL:  config.Duration(3 * time.Second),
		Shutdown:  config.Shutdown{Timeout: config.Duration(5 * time.Second)},
		Databases: map[string]config.Database{"split": {DSNs: []string{dsnA, dsnB}}},
		Sinks:     map[string]config.Sink{"kafka": {Type: "kafka", Brokers: c.ListenAddrs()}},
		Sources: []config.Source{{Name: "orders", Database: "split", Table: "public.outbox", Topic: "split",
			Layout: tenantLayout(), Shards: 2,
			Poll: config.Poll{Min: config.Duration(10 * time.Millisecond), Max: config.Duration(200 * time.Millisecond)}}},
	}
	cfg.ApplyDefaults()
	col := collect(t, c.ListenAddrs(), "split")
	a, _ := runApp(t, cfg, app.WithHistoryInterval(20*time.Millisecond), app.WithStatsInterval(100*time.Millisecond))
	b, _ := runApp(t, cfg, app.WithHistoryInterval(20*time.Millisecond), app.WithStatsInterval(100*time.Millisecond))

	for _, pool := range pools {
		for i := range rowsEach {
			pgtest.Exec(t, pool, fmt.Sprintf(`INSERT INTO public.outbox (k, payload) VALUES ('k%d', '{"n": %d}')`, i%keys, i))
		}
	}
	sources := []string{"orders@" + members[0], "orders@" + members[1]}
	waitFor(t, 30*time.Second, "every row of both databases", func() (bool, string) {
		got := tenantRows(col.records())
		return got[sources[0]] == rowsEach && got[sources[1]] == rowsEach, fmt.Sprint(got)
	})

	// Status: each database's source, its two buckets' leases held.
	waitFor(t, 20*time.Second, "status: each source held through its buckets' leases", func() (bool, string) {
		st, err := a.Status(ctx)
		if err != nil {
			return false, err.Error()
		}
		ok := 0
		for _, s := range st {
			for i, src := range sources {
				if s.Source != src {
					continue
				}
				if s.Database == members[i] && s.Held && s.State == app.StateRelaying && len(s.Shards) == 2 &&
					s.Shards[0].Lease == src+"/0" && s.Shards[1].Lease == src+"/1" {
					ok++
				}
			}
		}
		return ok == 2 && len(st) == 2, fmt.Sprintf("%+v", st)
	})

	// Each bucket is relayed by one replica.
	waitFor(t, 20*time.Second, "each bucket relayed by one replica", func() (bool, string) {
		held := map[string]int{}
		for _, x := range []*app.App{a, b} {
			for shard, v := range shardGauges(t, x) {
				held[shard] += v
			}
		}
		for _, src := range sources {
			for _, sh := range []string{src + "/0", src + "/1"} {
				if held[sh] != 1 {
					return false, fmt.Sprint(held)
				}
			}
		}
		return true, ""
	})

	// The console of either replica: the replicas of each database with
	// their share of its 2 buckets, and both databases' charts.
	var api struct {
		History  map[string][]struct{} `json:"history"`
		Replicas []struct {
			Database string `json:"database"`
			Holds    int    `json:"holds"`
			Share    int    `json:"share"`
		} `json:"replicas"`
	}
	for _, x := range []*app.App{a, b} {
		waitFor(t, 10*time.Second, "the admin server", func() (bool, string) { return x.AdminAddr() != "", "" })
		waitFor(t, 20*time.Second, "the console's replicas and charts of both databases", func() (bool, string) {
			code, body := httpGet(t, "http://"+x.AdminAddr()+"/api/sources")
			if err := json.Unmarshal([]byte(body), &api); code != 200 || err != nil {
				return false, body
			}
			holds, shares := map[string]int{}, map[string]int{}
			for _, r := range api.Replicas {
				holds[r.Database] += r.Holds
				shares[r.Database] += r.Share
			}
			for i, m := range members {
				if holds[m] != 2 || shares[m] != 2 || len(api.History[sources[i]]) < 2 {
					return false, body
				}
			}
			return true, ""
		})
	}
}

// shardGauges reads the outbox_relay_shard_relaying gauge: each bucket's
// lease, 1 while a's process relays it.
func shardGauges(t *testing.T, a *app.App) map[string]int {
	t.Helper()
	mfs, err := a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, mf := range mfs {
		if mf.GetName() != "outbox_relay_shard_relaying" {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[labels(m)["shard"]] = int(m.GetGauge().GetValue())
		}
	}
	return out
}
