package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/app"
)

func newStatus(g *globals) *cobra.Command {
	var (
		asJSON   bool
		watch    bool
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each source: who relays it, its backlog, rate, retries, dead letters and sinks",
		Long: `status reads what the running relays record in their own tables (every 15 s),
so it works from any machine with the configuration, whichever replica relays
each source. Per source: the process holding it and its lease term, events
pending and the age of the oldest, events delivered a second over the last
minute, events backing off, dead letters not replayed, the last successful
claim, and each sink's state (ok, failing, half-open, circuit open).

The STATE column says how each source stands: ok (relayed), starting (its
holder took the lease a moment ago and has not recorded a claim yet: it has
readiness.max_claim_failure, plus 30 s for the record, to do so), or STUCK
with the cause: no relay holds it, no successful claim since its holder took
it or for longer than its readiness.max_claim_failure (with the holder's
reason when it recorded one, such as an exactly-once takeover failing for a
missing progress topic), its oldest pending event older than its
readiness.max_oldest_pending, a sink's circuit open, or its database out of
service (a database of an entry with dsns or discover that cannot be
reached or taken up: cause database_down).

PENDING is the backlog as the holder last counted it; "(stale, 2m old)"
follows it when that count is not the current holder's latest (the record
was written by an earlier process, or not refreshed for 45 s).

Below the sources, the replicas: every relay process registered with a live
heartbeat in each database, how long it has run, how many sources it holds
and its share (the database's sources ÷ its live replicas, rounded up).

It exits non-zero when a source is stuck (not while it is starting).
--watch refreshes until interrupted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, err := g.load()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			a, err := app.Open(ctx, cfg, log)
			if err != nil {
				return err
			}
			defer a.Close()
			for {
				st, err := a.Status(ctx)
				if err != nil {
					return err
				}
				if watch {
					fmt.Fprintf(g.stdout, "\033[H\033[2J%s\n", time.Now().Format(time.RFC3339))
				}
				if asJSON {
					enc := json.NewEncoder(g.stdout)
					enc.SetIndent("", "  ")
					if err := enc.Encode(st); err != nil {
						return err
					}
				} else {
					printStatus(g.stdout, st, time.Now())
					reps, err := a.Replicas(ctx, st)
					if err != nil {
						return err
					}
					printReplicas(g.stdout, reps, time.Now())
				}
				if !watch {
					if n := countStuck(st); n > 0 {
						return fmt.Errorf("%d source(s) stuck", n)
					}
					return nil
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(interval):
				}
			}
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: one object per source")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "refresh until interrupted")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "refresh interval with --watch")
	return cmd
}

func countStuck(st []app.SourceStatus) int {
	n := 0
	for _, s := range st {
		if s.Stuck != "" {
			n++
		}
	}
	return n
}

// printStatus writes one line per source.
func printStatus(w io.Writer, st []app.SourceStatus, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tOWNER\tTERM\tPENDING\tOLDEST\tEVENTS/S\tRETRYING\tDEAD\tLAST CLAIM\tSINKS\tSTATE")
	for _, s := range st {
		owner := s.Owner
		if owner == "" {
			owner = "-"
		} else if !s.Held {
			owner += " (expired)"
		}
		last := "never"
		if s.LastClaim != nil {
			last = now.Sub(*s.LastClaim).Round(time.Second).String() + " ago"
		}
		var sinks []string
		for _, name := range slices.Sorted(maps.Keys(s.Sinks)) {
			sinks = append(sinks, name+"="+s.Sinks[name])
		}
		state := "ok"
		switch {
		case s.Stuck != "":
			state = "STUCK: " + s.Stuck
		case s.State == app.StateStarting:
			state = "starting: " + s.Reason
		case s.State == app.StateStandby:
			state = "standby: " + s.Reason
		}
		pending := fmt.Sprint(s.Pending)
		switch {
		case s.Updated == nil && !s.PendingLive:
			pending = "-"
		case s.PendingStale:
			pending += fmt.Sprintf(" (stale, %s old)", (time.Duration(s.PendingAgeSeconds * float64(time.Second))).Round(time.Second))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%.1f\t%d\t%d\t%s\t%s\t%s\n", s.Source, owner, s.Term, pending,
			(time.Duration(s.OldestPendingSeconds * float64(time.Second))).Round(time.Second), s.EventsPerSecond,
			s.Retrying, s.DeadLetters, last, strings.Join(sinks, ","), state)
	}
	_ = tw.Flush()
}

// printReplicas writes one line per live replica: the sources it holds
// against its share.
func printReplicas(w io.Writer, reps []app.ReplicaStatus, now time.Time) {
	if len(reps) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DATABASE\tREPLICA\tUP\tHOLDS\tSHARE")
	for _, r := range reps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", r.Database, r.Owner, now.Sub(r.Since).Round(time.Second), r.Holds, r.Share)
	}
	_ = tw.Flush()
}
