package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/app"
	"github.com/outbox-relay/outbox-relay/internal/source"
)

func newRetention(g *globals) *cobra.Command {
	var (
		r       source.PurgeOptions
		age     ageFlag
		only    string
		dryRun  bool
		include bool
	)
	cmd := &cobra.Command{
		Use:   "retention",
		Short: "Delete settled outbox rows older than an age, in small batches",
		Long: `retention deletes, from every source's table, the rows the relay has settled
longer ago than --older-than (by their published-at column, else their created
time): delivered rows, and with --include-dead the rows that were
dead-lettered (failed_events keeps a copy of each; a replay restores it).
Pending rows, rows backing off and rows claimed by a relay are never touched.
It also prunes the relay's own tables: dead letters replayed before the cutoff
with their audit rows, and retry state of events no longer in the table.

Each batch of at most --batch-size rows is one short transaction that skips
rows another transaction holds and waits at most --lock-timeout for a lock,
with --pause between batches, so it is safe to run while the relay runs. The
role needs DELETE on the outbox tables (the relay itself does not). On MySQL
and MariaDB each batch finds its rows with a plain read, then locks and
deletes them one by one by the primary key (the index the relay's claims read
by); the lock timeout is innodb_lock_wait_timeout and lock_wait_timeout,
in whole seconds.
It prints one line per source and exits non-zero if any source failed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !age.set {
				return errors.New("--older-than is required (e.g. --older-than 168h or 7d)")
			}
			r.OlderThan, r.DryRun, r.IncludeDead = age.d, dryRun, include
			if r.BatchSize < 1 || r.BatchSize > 100000 {
				return fmt.Errorf("--batch-size: must be between 1 and 100000, got %d", r.BatchSize)
			}
			return forEachSource(cmd, g, only, func(ctx context.Context, a *app.App, s *app.Source) error {
				c, err := a.Purge(ctx, s, r)
				printRetention(g.stdout, s, r.DryRun, c, err)
				return err
			})
		},
	}
	f := cmd.Flags()
	f.Var(&age, "older-than", "delete rows settled longer ago than this (Go duration, or days: 30d); required")
	f.StringVar(&only, "source", "", "only this source (a name from the config, or a discovered source's full name)")
	f.BoolVar(&include, "include-dead", false, "also delete dead-lettered rows (their copies stay in failed_events)")
	f.IntVar(&r.BatchSize, "batch-size", source.DefaultPurgeBatch, "rows deleted per transaction")
	f.DurationVar(&r.Pause, "pause", 50*time.Millisecond, "pause between batches")
	f.DurationVar(&r.LockTimeout, "lock-timeout", source.DefaultPurgeLockTimeout, "longest a batch waits for a lock before it is tried again")
	f.BoolVar(&dryRun, "dry-run", false, "count what would be deleted, delete nothing")
	return cmd
}

func newOptimize(g *globals) *cobra.Command {
	var only string
	cmd := &cobra.Command{
		Use:   "optimize",
		Short: "Vacuum (PostgreSQL) or rebuild (MySQL) every source's table, and report its size",
		Long: `optimize runs VACUUM (ANALYZE) on every PostgreSQL source's table: the space
of deleted rows becomes reusable, empty pages at the end are given back, and the
planner's statistics are refreshed. It blocks neither reads nor writes, so it is
safe while the relay runs; it does not rewrite the table (VACUUM FULL or
pg_repack do, with their own locks). The role must own the table (or the
database). It prints the size and dead tuples before and after.

On MySQL and MariaDB it runs OPTIMIZE TABLE, which InnoDB carries out as an
online rebuild and analyze: the space of deleted rows is given back. Reads and
writes go on during the rebuild, but it takes a brief exclusive metadata lock
at its start and end, which waits for open transactions on the table (a batch
in flight) and holds new statements back meanwhile; run it when the table is
quiet. The user needs SELECT and INSERT on the table. It prints the size and
free space before and after, from information_schema.TABLES.

One line per source.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return forEachSource(cmd, g, only, func(ctx context.Context, a *app.App, s *app.Source) error {
				rep, err := a.Optimize(ctx, s)
				if err != nil {
					fmt.Fprintf(g.stdout, "%s (%s): FAILED: %v\n", s.Name, s.TableName(), err)
					return err
				}
				if rep.Rebuilt {
					fmt.Fprintf(g.stdout, "%s (%s): rebuilt and analyzed in %s; size %s -> %s; free space %s -> %s; rows about %d\n",
						s.Name, s.TableName(), rep.Took.Round(time.Millisecond), bytesize(rep.SizeBefore), bytesize(rep.SizeAfter),
						bytesize(rep.FreeBefore), bytesize(rep.FreeAfter), rep.Live)
					return nil
				}
				fmt.Fprintf(g.stdout, "%s (%s): vacuumed and analyzed in %s; size %s -> %s; dead tuples %d -> %d; live tuples %d\n",
					s.Name, s.TableName(), rep.Took.Round(time.Millisecond), bytesize(rep.SizeBefore), bytesize(rep.SizeAfter),
					rep.DeadBefore, rep.DeadAfter, rep.Live)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&only, "source", "", "only this source (a name from the config, or a discovered source's full name)")
	return cmd
}

// forEachSource opens the configured databases, resolves the sources
// (--source picks one) and calls fn on each in turn. A source that fails
// does not stop the others; the error then names how many failed.
func forEachSource(cmd *cobra.Command, g *globals, only string, fn func(context.Context, *app.App, *app.Source) error) error {
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
	srcs, err := a.Resolve(ctx)
	if err != nil {
		return err
	}
	var picked []*app.Source
	for _, s := range srcs {
		if only == "" || s.Name == only || s.Config.Name == only {
			picked = append(picked, s)
		}
	}
	if len(picked) == 0 {
		if only != "" {
			return fmt.Errorf("--source: no source named %q", only)
		}
		return errors.New("no sources found")
	}
	var failed []string
	for _, s := range picked {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := fn(ctx, a, s); err != nil {
			log.Error("source failed", "source", s.Name, "err", err)
			failed = append(failed, s.Name)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d sources failed: %s", len(failed), len(picked), strings.Join(failed, ", "))
	}
	return nil
}

// printRetention writes a source's retention line.
func printRetention(w io.Writer, s *app.Source, dry bool, c source.PurgeResult, err error) {
	verb := "deleted"
	if dry {
		verb = "would delete"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s): ", s.Name, s.TableName())
	switch {
	case c.KeptByLayout && s.Config.Cursor():
		b.WriteString("the table is history, which the relay never writes to (capture cursor); ")
		fmt.Fprintf(&b, "%s ", verb)
	case c.KeptByLayout:
		b.WriteString("rows are deleted on delivery; ")
		fmt.Fprintf(&b, "%s ", verb)
	default:
		fmt.Fprintf(&b, "%s %d published, %d dead", verb, c.Published, c.Dead)
		if !dry {
			fmt.Fprintf(&b, " in %d batch(es)", c.Batches)
		}
		b.WriteString("; ")
	}
	fmt.Fprintf(&b, "%d replayed dead letter(s), %d audit row(s), %d retry state(s)", c.FailedEvents, c.Audit, c.RetryState)
	if err != nil {
		fmt.Fprintf(&b, "; FAILED: %v", err)
	}
	fmt.Fprintln(w, b.String())
}

// bytesize formats a size in bytes as B, KiB, MiB or GiB.
func bytesize(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	v, suffix := float64(n)/unit, "KiB"
	for _, s := range []string{"MiB", "GiB", "TiB"} {
		if v < unit {
			break
		}
		v, suffix = v/unit, s
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + suffix
}

// ageFlag is a duration flag that also takes whole days ("30d").
type ageFlag struct {
	d   time.Duration
	set bool
}

func (a *ageFlag) String() string {
	if !a.set {
		return ""
	}
	return a.d.String()
}

func (a *ageFlag) Type() string { return "duration" }

func (a *ageFlag) Set(s string) error {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil {
			return fmt.Errorf("invalid age %q: want a Go duration (168h) or whole days (7d)", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return fmt.Errorf("invalid age %q: want a Go duration (168h) or whole days (7d)", s)
		}
	}
	if d <= 0 {
		return fmt.Errorf("invalid age %q: must be more than zero", s)
	}
	a.d, a.set = d, true
	return nil
}
