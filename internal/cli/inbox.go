package cli

import (
	"database/sql"
	"fmt"

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/inbox"
)

func newInbox(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "inbox", Short: "Maintain a consumer's table of processed event ids"}
	var dsn, driver, table, expires string
	var batch int
	purge := &cobra.Command{
		Use:   "purge",
		Short: "Delete the expired ids of a processed-events table, in batches",
		Long: `purge deletes the rows of a consumer's processed-events table (seed 001's
processed_events by default, or the inbox package's outbox_inbox) whose
expiry has passed, --batch rows at a time, and says how many it deleted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dsn == "" {
				return fmt.Errorf("--dsn is required")
			}
			dialect, sqlDriver := inbox.Postgres, "pgx"
			switch driver {
			case "postgres":
			case "mysql":
				dialect, sqlDriver = inbox.MySQL, "mysql"
			default:
				return fmt.Errorf("--driver: must be postgres or mysql, got %q", driver)
			}
			db, err := sql.Open(sqlDriver, dsn)
			if err != nil {
				return err
			}
			defer db.Close()
			t := inbox.ProcessedEvents
			t.Name, t.ExpiresAt = table, expires
			n, err := inbox.Purge(cmd.Context(), db, dialect, t, batch)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "deleted %d expired ids from %s\n", n, table)
			return nil
		},
	}
	purge.Flags().StringVar(&dsn, "dsn", "", "the consumer's database")
	purge.Flags().StringVar(&driver, "driver", "postgres", "postgres or mysql (MySQL, MariaDB)")
	purge.Flags().StringVar(&table, "table", inbox.ProcessedEvents.Name, "the processed-events table (schema-qualified if need be)")
	purge.Flags().StringVar(&expires, "expires-column", inbox.ProcessedEvents.ExpiresAt, "its expiry column")
	purge.Flags().IntVar(&batch, "batch", 1000, "rows deleted per statement")
	hideConfigFlag(purge)
	cmd.AddCommand(purge)
	return cmd
}
